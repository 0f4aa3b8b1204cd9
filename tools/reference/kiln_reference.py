#!/usr/bin/env python3
"""diffusers as kiln's oracle: one generation call, run in float32 on the CPU.

Given a call (a JSON object; see CALL_KEYS), runs diffusers' own pipeline on a diffusers folder and returns
the final latents (before VAE scaling) and the decoded image in [0, 1], as kiln's GenerationResult holds
them. Used by scripts/conformance-sweep and by hand:

    python tools/reference/kiln_reference.py CALL.json OUT.safetensors

Set-up (a developer's tool; CI never runs it): docs/CONFORMANCE.md.

kiln's conventions where they are not diffusers' own argument names:
- `sampler` is a kiln name (ddim, pndm, euler, euler_karras, euler_a, heun, heun_karras, lms, lms_karras,
  dpmpp_2m, dpmpp_2m_karras, unipc, unipc_karras, lcm): <Scheduler>.from_config(the folder's config,
  **overrides), as kiln's --sampler promises. `timestep_spacing` (optional) is one more override.
- `clip_skip` counts as AUTOMATIC1111 does (1 = last layer, 2 = penultimate); diffusers' own argument
  is one less (None for 1).
- `negative_clip_skip`: "a1111" (kiln's choice: the negative prompt is encoded with the same clip skip as
  the prompt, as AUTOMATIC1111 and ComfyUI do) or "diffusers" (the negative ignores clip skip, as
  diffusers' encode_prompt does). Only matters when clip_skip > 1 and guidance applies.
- `init_image`: a PNG path (img2img); its 8-bit values / 255 are the image, as kiln reads it.
"""
import json
import sys

import numpy as np
import torch

CALL_KEYS = {
    "model": "a diffusers folder",
    "prompt": "text",
    "negative_prompt": "text, or null for none (SDXL then conditions on zeros)",
    "width": "pixels", "height": "pixels", "steps": "int", "guidance": "float (diffusers' guidance_scale)",
    "sampler": "kiln sampler name, or null for the folder's own scheduler",
    "timestep_spacing": "leading | linspace | trailing | null",
    "seed": "int (a CPU torch.Generator)",
    "clip_skip": "1 | 2 ... (AUTOMATIC1111's count)",
    "negative_clip_skip": "a1111 | diffusers",
    "batch_size": "images per prompt",
    "init_image": "PNG path for img2img, or null", "strength": "img2img strength",
    "scheduler_config": "optional: the scheduler config to start from instead of the folder's",
}

# kiln sampler name -> (diffusers class, from_config overrides)
SAMPLERS = {
    "ddim": ("DDIMScheduler", {}),
    "pndm": ("PNDMScheduler", {}),
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_karras": ("EulerDiscreteScheduler", {"use_karras_sigmas": True}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "heun": ("HeunDiscreteScheduler", {}),
    "heun_karras": ("HeunDiscreteScheduler", {"use_karras_sigmas": True}),
    "lms": ("LMSDiscreteScheduler", {}),
    "lms_karras": ("LMSDiscreteScheduler", {"use_karras_sigmas": True}),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", {}),
    "dpmpp_2m_karras": ("DPMSolverMultistepScheduler", {"use_karras_sigmas": True}),
    "unipc": ("UniPCMultistepScheduler", {}),
    "unipc_karras": ("UniPCMultistepScheduler", {"use_karras_sigmas": True}),
    "lcm": ("LCMScheduler", {}),
}


class Oracle:
    """Loads each diffusers folder once (float32, CPU) and runs calls on it."""

    def __init__(self):
        self._pipes = {}
        torch.set_grad_enabled(False)

    def _pipeline(self, folder):
        if folder not in self._pipes:
            import diffusers
            with open(f"{folder}/model_index.json") as f:
                cls = getattr(diffusers, json.load(f)["_class_name"])
            pipe = cls.from_pretrained(folder, torch_dtype=torch.float32)
            pipe.set_progress_bar_config(disable=True)
            # diffusers 0.42's clip skip reads text_encoder.text_model.final_layer_norm; transformers 5's
            # CLIPTextModel holds final_layer_norm itself (no text_model level). Point the attribute at the model
            # (outside torch's module registry, so no cycle), and diffusers' own code path runs unchanged.
            for name in ("text_encoder", "text_encoder_2"):
                te = getattr(pipe, name, None)
                if te is not None and not hasattr(te, "text_model") and hasattr(te, "final_layer_norm"):
                    object.__setattr__(te, "text_model", te)
            self._pipes[folder] = (pipe, dict(pipe.scheduler.config))
        return self._pipes[folder]

    def run(self, call):
        """Returns {"final_latent": [N,4,h,w], "image": [N,3,H,W]} as float32 numpy arrays, plus the
        scheduler's class and resolved config under "scheduler"."""
        import diffusers
        pipe, base_config = self._pipeline(call["model"])
        sdxl = "XL" in type(pipe).__name__
        if call.get("scheduler_config"):
            # The config a pipeline made from a single file starts from (diffusers' from_single_file takes the
            # architecture's hub config): loaded as its own class first, so that the keys it leaves unset are
            # marked as defaults and the target class's defaults replace them, as with a loaded folder.
            given = dict(call["scheduler_config"])
            base_config = dict(getattr(diffusers, given["_class_name"]).from_config(given).config)
        if call.get("sampler"):
            cls_name, overrides = SAMPLERS[call["sampler"]]
            overrides = dict(overrides)
        else:
            cls_name, overrides = base_config["_class_name"], {}
        if call.get("timestep_spacing"):
            overrides["timestep_spacing"] = call["timestep_spacing"]
        scheduler = getattr(diffusers, cls_name).from_config(base_config, **overrides)

        components = dict(pipe.components)
        components["scheduler"] = scheduler
        img2img = call.get("init_image") is not None
        if img2img:
            runner = (diffusers.StableDiffusionXLImg2ImgPipeline if sdxl
                      else diffusers.StableDiffusionImg2ImgPipeline)(**components)
        else:
            runner = type(pipe)(**components)
        runner.set_progress_bar_config(disable=True)

        n = int(call.get("batch_size", 1))
        guidance = float(call["guidance"])
        clip_skip = int(call.get("clip_skip", 1))
        diffusers_clip_skip = clip_skip - 1 if clip_skip > 1 else None
        negative = call.get("negative_prompt")
        args = dict(num_inference_steps=int(call["steps"]), guidance_scale=guidance, num_images_per_prompt=n,
                    generator=torch.Generator("cpu").manual_seed(int(call["seed"])), output_type="latent")
        if img2img:
            from PIL import Image
            pixels = np.asarray(Image.open(call["init_image"]).convert("RGB"), dtype=np.float32) / 255.0
            args["image"] = torch.from_numpy(pixels).permute(2, 0, 1)[None] # [1,3,H,W] in [0,1], as kiln reads it
            args["strength"] = float(call["strength"])
        else:
            args["width"], args["height"] = int(call["width"]), int(call["height"])

        a1111_negative = (call.get("negative_clip_skip", "a1111") == "a1111" and clip_skip > 1 and guidance > 1)
        if not a1111_negative:
            args.update(prompt=call["prompt"], negative_prompt=negative, clip_skip=diffusers_clip_skip)
        else:
            args.update(self._embeddings_with_negative_clip_skip(runner, sdxl, call["prompt"], negative,
                                                                 diffusers_clip_skip))
        latents = runner(**args).images
        vae = runner.vae
        decoded = vae.decode(latents / vae.config.scaling_factor, return_dict=False)[0]
        image = (decoded / 2 + 0.5).clamp(0, 1)
        # Contiguous copies: torch may hand back another memory order (channels-last), which numpy keeps
        # through astype and safetensors would then write in that order.
        return {"final_latent": np.ascontiguousarray(latents.float().numpy()),
                "image": np.ascontiguousarray(image.float().numpy()),
                "scheduler": {"class": cls_name, "config": dict(scheduler.config)}}

    @staticmethod
    def _embeddings_with_negative_clip_skip(runner, sdxl, prompt, negative, clip_skip):
        """The prompt and negative embeddings, both encoded with clip skip (AUTOMATIC1111's way), passed to
        the pipeline as tensors (one row each: the pipeline repeats them for num_images_per_prompt). The
        negative is encoded as a prompt is, so diffusers' own code path makes it."""
        n = 1
        cpu = torch.device("cpu")
        if not sdxl:
            pos, _ = runner.encode_prompt(prompt, cpu, n, False, clip_skip=clip_skip)
            neg, _ = runner.encode_prompt(negative or "", cpu, n, False, clip_skip=clip_skip)
            return dict(prompt_embeds=pos, negative_prompt_embeds=neg)
        pos, _, pos_pooled, _ = runner.encode_prompt(prompt, device=cpu, num_images_per_prompt=n,
                                                     do_classifier_free_guidance=False, clip_skip=clip_skip)
        if negative is None and runner.config.force_zeros_for_empty_prompt:
            neg, neg_pooled = torch.zeros_like(pos), torch.zeros_like(pos_pooled)
        else:
            neg, _, neg_pooled, _ = runner.encode_prompt(negative or "", device=cpu, num_images_per_prompt=n,
                                                         do_classifier_free_guidance=False, clip_skip=clip_skip)
        return dict(prompt_embeds=pos, negative_prompt_embeds=neg, pooled_prompt_embeds=pos_pooled,
                    negative_pooled_prompt_embeds=neg_pooled)


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        print("usage: kiln_reference.py CALL.json OUT.safetensors", file=sys.stderr)
        return 2
    from safetensors.numpy import save_file
    with open(argv[1]) as f:
        call = json.load(f)
    out = Oracle().run(call)
    save_file({"final_latent": out["final_latent"], "image": out["image"]}, argv[2],
              metadata={"call": json.dumps(call), "scheduler": json.dumps(out["scheduler"], default=str)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
