"""torchao: int8 weight-only and dynamic-activation int8 quantization of a tiny Llama on
tpu (quantized where it lies, int8 data kept on tpu) gives CPU's quantized result, in
eager (strict, fused) and under torch.compile(backend="tpu"), and greedy generation
takes CPU's tokens; no op falls back."""
import copy

import pytest
import torch

import torch_tpu

quantization = pytest.importorskip("torchao.quantization")
transformers = pytest.importorskip("transformers")

CONFIGS = {"int8 weight-only": quantization.Int8WeightOnlyConfig,
           "int8 dynamic activation": quantization.Int8DynamicActivationInt8WeightConfig}


def _tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return transformers.LlamaForCausalLM(config).eval()


def _quantized(model, name, device):
    model = copy.deepcopy(model).to(device)
    quantization.quantize_(model, CONFIGS[name]())
    return model


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_quantized_llama_matches_cpu(name, mode):
    model = _tiny_llama()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    cpu = _quantized(model, name, "cpu")
    with torch_tpu.eager_mode(mode):
        tpu = _quantized(model, name, "tpu")
        for (key, w), (_, w_cpu) in zip(tpu.named_parameters(), cpu.named_parameters()):
            for part in getattr(w, "tensor_data_names", ()):
                data, reference = getattr(w, part), getattr(w_cpu, part)
                assert data.device.type == "tpu" and data.dtype == reference.dtype, (key, part)
                torch.testing.assert_close(data.cpu(), reference, rtol=1e-6, atol=0, msg=f"{key}.{part}")
        assert tpu.model.layers[0].mlp.up_proj.weight.qdata.dtype == torch.int8
        with torch.no_grad():
            expected = cpu(ids, attention_mask=mask).logits
            logits = tpu(ids.to("tpu"), attention_mask=mask.to("tpu")).logits.cpu()
            compiled = torch.compile(tpu, backend="tpu")(ids.to("tpu"), attention_mask=mask.to("tpu")).logits.cpu()
            tokens = tpu.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), max_new_tokens=5, do_sample=False)
            expected_tokens = cpu.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False)
    # Dynamic activation quantization rounds activations to int8 per row: a float32
    # difference of 1e-7 in a normalised activation may move one element by a step.
    tolerance = dict(rtol=1e-5, atol=1e-5) if name == "int8 weight-only" else dict(rtol=0, atol=1e-2)
    torch.testing.assert_close(logits, expected, **tolerance)
    torch.testing.assert_close(compiled, expected, **tolerance)
    assert torch.equal(tokens.cpu(), expected_tokens)


def test_dynamic_activation_quantization_of_one_linear_is_exact():
    """Where the activations are CPU's bit for bit, so is the int8 result."""
    torch.manual_seed(0)
    linear = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    x = torch.randn(16, 32)
    cpu = _quantized(linear, "int8 dynamic activation", "cpu")
    tpu = _quantized(linear, "int8 dynamic activation", "tpu")
    with torch.no_grad():
        torch.testing.assert_close(tpu(x.to("tpu")).cpu(), cpu(x), rtol=0, atol=0)
