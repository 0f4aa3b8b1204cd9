// A Stable Diffusion checkpoint as users have it, loaded: architecture, text encoders with their
// tokenizers, UNet, VAE, and the scheduler configuration diffusers would use with it.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/dtype.h"
#include "models/clip/clip_text_model.h"
#include "models/lora/lora_source.h"
#include "models/unet/unet.h"
#include "models/vae/vae.h"
#include "text/clip_tokenizer.h"

namespace kiln {

enum class Architecture { SD1, SD2, SDXL };
enum class FileLayout { DiffusersFolder, SingleFile };
const char* architecture_name(Architecture a);  // "SD 1.x", "SD 2.x", "SDXL"
const char* layout_name(FileLayout l);

struct TextEncoder {
    ClipTokenizer tokenizer;
    ClipTextModel model;
};

struct LoadOptions {
    std::optional<std::string> prediction;  // "epsilon" | "v_prediction": needed for SD 2.x single files
    // Precision of the linear/conv weights in memory: unset keeps the file's (F16/BF16 files stay 16-bit,
    // half the memory of float32); F32, F16 or BF16 converts at load (--weights); a block format (Q8_0 ... Q6_K)
    // quantizes the matrices models/quant_policy.h picks (on CUDA and Vulkan they stay blocks in device memory,
    // dequantized a layer at a time beside each product: docs/QUANT.md).
    std::optional<DType> weights;
    // Where the model runs. On a GPU every weight is moved there in `precision`, the dtype activations are
    // computed in (--precision); SDXL's VAE, whose activations overflow fp16, runs in bfloat16 where the
    // device has it, else in float32 as diffusers' force_upcast does.
    Device device;
    DType precision = DType::F16;
    // False leaves the VAE encoder unread (Vae::load's with_encoder): txt2img never encodes, and SD's
    // encoder is 65 MiB in fp16. img2img needs it.
    bool vae_encoder = true;
    // On a GPU: every weight leaves the device once loaded (WeightSource::offload_weights), for a memory
    // budget (--vram) to bring back by stage or block (pipeline/gpu_memory_plan.h). Loading then holds one
    // weight of device memory at a time.
    bool offload_weights = false;
    // LoRA files merged into the text encoders' and UNet's weights as they load (docs/LORA.md). Modules that
    // match no layer of the model are reported through `notice` and skipped, as AUTOMATIC1111 does; a file of
    // which no module matches is InvalidArgument (a LoRA for another architecture).
    std::vector<LoraApplication> loras;
    std::function<void(const std::string&)> notice;
    // --unet FILE: the UNet from this file instead of the model's own: a checkpoint in the original layout, a UNet
    // alone with unprefixed keys (ComfyUI-GGUF's quantized UNet files), a UNet in diffusers' layout (its weights file,
    // its unet/ folder, or a diffusers model folder: its unet/); checked against the text encoders.
    std::string unet_path;
};

// The dtype a component's weights and activations have on options.device (SDXL's VAE: see above).
DType device_precision(const LoadOptions& options, Architecture arch, bool is_vae);

uint64_t next_model_serial();
struct StableDiffusionModel;
// "unet of model N ": the start of the keys of the model's recorded UNet calls (pipeline/generate.cpp).
std::string unet_recording_key_prefix(const StableDiffusionModel& model);

struct StableDiffusionModel {
    Architecture arch = Architecture::SD1;
    FileLayout layout = FileLayout::SingleFile;
    std::string path;                     // what the user named
    std::string name;                     // file or folder name without extension (PNG metadata)
    std::vector<TextEncoder> text_encoders;  // one, or two for SDXL
    std::unique_ptr<UNet> unet;
    std::unique_ptr<Vae> vae;
    float vae_scale = 0.18215f;
    nlohmann::json scheduler_config;      // diffusers' scheduler_config.json for this model
    bool force_zeros_for_empty_prompt = false;  // SDXL: an empty negative prompt means zero embeddings
    Device device;                        // where the weights are (LoadOptions::device)
    // Different for every model made in this process: recorded GPU calls (Backend::run_recorded) are keyed
    // by it, so that a recording never replays another model's weights.
    uint64_t serial = next_model_serial();
    DType precision = DType::F32;         // the UNet's and text encoders' activations there (F32 on the CPU)
    std::vector<LoraApplication> loras;   // merged into the weights at load (LoadOptions::loras)
};

StableDiffusionModel load_model(const std::string& path, const LoadOptions& options = {});

// Which architecture a single-file checkpoint holds, from its tensor names.
Architecture detect_single_file_architecture(const SafetensorsFile& file);
// Whether the file holds a UNet alone in the original layout, its keys without "model.diffusion_model." (ComfyUI-GGUF's
// UNet files), which --unet takes (LoadOptions::unet_path).
bool holds_unet_alone(const SafetensorsFile& file);
// Whether the file holds a UNet in diffusers' layout (a diffusers folder's unet/diffusion_pytorch_model.safetensors,
// or a GGUF with its names), which --unet takes too.
bool holds_diffusers_unet(const SafetensorsFile& file);
// The weights file of a diffusers component folder as the loader picks it (`stem`.safetensors, its fp16 variant,
// or PyTorch's .bin), or "" where the folder has none.
std::string diffusers_component_weights(const std::string& dir, const std::string& stem);

}  // namespace kiln
