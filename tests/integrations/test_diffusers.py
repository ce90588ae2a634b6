"""Diffusers: a text-to-image pipeline at tiny size (UNet2DConditionModel, a VAE,
a CLIP text encoder, DDIM, classifier-free guidance) gives CPU's image on tpu, in
strict and fused mode with no fallback, and a UNet training step matches CPU's."""
import copy

import pytest
import torch

import torch_tpu

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")


class _Tokenizer:
    """A stand-in for CLIP's tokenizer (no download): each prompt's ids come from its text."""
    model_max_length = 16
    added_tokens_encoder = {}

    def tokenize(self, text):
        return text.split()

    def __call__(self, prompts, **kwargs):
        prompts = [prompts] if isinstance(prompts, str) else prompts
        ids = torch.tensor([[(sum(map(ord, p)) + 7 * i) % 100 for i in range(16)] for p in prompts])
        return transformers.BatchEncoding({"input_ids": ids, "attention_mask": torch.ones_like(ids)})


def _unet():
    return diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16, attention_head_dim=4, norm_num_groups=4)


def _pipeline():
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 8), latent_channels=4, norm_num_groups=4,
        layers_per_block=1, sample_size=16)
    text = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=16, projection_dim=16))
    return diffusers.StableDiffusionPipeline(
        vae=vae, text_encoder=text, tokenizer=_Tokenizer(), unet=_unet(),
        scheduler=diffusers.DDIMScheduler(num_train_timesteps=100, clip_sample=False), safety_checker=None,
        feature_extractor=None, requires_safety_checker=False)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_text_to_image_matches_cpu(mode):
    pipeline = _pipeline()
    latents = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    images = {}
    torch_tpu.reset_metrics()
    for device in ("cpu", "tpu"):
        pipe = copy.deepcopy(pipeline).to(device)
        pipe.set_progress_bar_config(disable=True)
        with torch_tpu.eager_mode(mode):
            images[device] = pipe("a tiny cat", negative_prompt="blurry", num_inference_steps=3, guidance_scale=5.0,
                                  latents=latents.to(device), output_type="pt", height=16, width=16).images.cpu()
    assert images["tpu"].shape == (1, 3, 16, 16)
    torch.testing.assert_close(images["tpu"], images["cpu"], rtol=1e-3, atol=1e-3)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_unet_training_step_matches_cpu():
    torch.manual_seed(0)
    unet = _unet()
    g = torch.Generator().manual_seed(1)
    noisy, noise = torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 4, 8, 8, generator=g)
    context, timesteps = torch.randn(2, 5, 16, generator=g), torch.tensor([3, 50])
    results = {}
    for device in ("cpu", "tpu"):
        model = copy.deepcopy(unet).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # linear in the gradients: comparable
        prediction = model(noisy.to(device), timesteps.to(device), encoder_hidden_states=context.to(device)).sample
        loss = torch.nn.functional.mse_loss(prediction, noise.to(device))
        loss.backward()
        grads = {n: p.grad.cpu() for n, p in model.named_parameters()}
        optimizer.step()
        results[device] = (loss.item(), grads, {n: p.detach().cpu() for n, p in model.named_parameters()})
    assert results["tpu"][0] == pytest.approx(results["cpu"][0], rel=1e-4)
    for name, grad in results["cpu"][1].items():
        torch.testing.assert_close(results["tpu"][1][name], grad, rtol=1e-3, atol=1e-5, msg=name)
        torch.testing.assert_close(results["tpu"][2][name], results["cpu"][2][name], rtol=1e-4, atol=1e-5, msg=name)
