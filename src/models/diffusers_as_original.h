// A diffusers folder's weights under the original (LDM / stable-diffusion.cpp) layout's names, for `kiln convert`:
// the inverses of the single-file loader's rename tables (unet_ldm_name, ldm_vae_original, clip_hf_original,
// openclip_original). Each original tensor lists the diffusers tensors it is made of with the WeightMapping by which
// the single-file loader would take each of them back, so that the converter quantizes it by the same policy as the
// single file's tensor of that name.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "models/weight_source.h"

namespace kiln {

struct OriginalTensor {
    std::shared_ptr<const SafetensorsFile> file;  // the component's weights file holding the parts
    // (diffusers name, how the loader takes it from the original tensor): one, or q, k, v in row order (RowSlice).
    std::vector<std::pair<std::string, WeightMapping>> parts;
};

// The folder is loaded first, as `kiln txt2img -m DIR` would load it (on the CPU, matrices as views of the files): a
// missing component or a tensor the loader does not expect is the loader's error naming it. A tensor the original
// layout has no name for, or a fused q, k, v lacking a part: InvalidModel naming it. By original name; the text
// encoders' position_ids buffer is left out, as diffusers' own converter does.
std::map<std::string, OriginalTensor> diffusers_as_original(const std::string& dir);

}  // namespace kiln
