"""Hugging Face Transformers models on tpu, compared with the same models on CPU:
logits, loss and every gradient, greedy `generate` (KV cache), and loading with
`device_map="tpu"`. Small random configurations (no download); dropout off, so
CPU and tpu compute the same function. No op may fall back to the CPU."""
import copy
import json

import pytest
import torch
from torch.testing import assert_close
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

import torch_tpu

SMALL = dict(vocab_size=256, max_position_embeddings=64)
DECODER = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=128, **SMALL)
CAUSAL_LMS = {
    "gpt2": dict(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                 attn_pdrop=0.0),  # tied embedding and head, learned positions
    "llama": dict(num_key_value_heads=2, **DECODER),  # RoPE, RMSNorm, grouped-query attention, SwiGLU
    "mistral": dict(num_key_value_heads=2, **DECODER),
    "qwen2": dict(num_key_value_heads=2, **DECODER),  # biased q/k/v projections
    "gemma": dict(num_key_value_heads=1, head_dim=16, **DECODER),  # multi-query attention, GeGLU
    "phi": dict(resid_pdrop=0.0, embd_pdrop=0.0, **DECODER),  # partial rotary, parallel block
    "gpt_neox": dict(**DECODER),
    "opt": dict(num_hidden_layers=2, num_attention_heads=2, hidden_size=64, ffn_dim=128, word_embed_proj_dim=64,
                dropout=0.0, attention_dropout=0.0, **SMALL),
}


def build(auto_class, model_type, **config):
    cfg = AutoConfig.for_model(model_type, **config)
    torch.manual_seed(0)
    cpu = auto_class.from_config(cfg)
    return cpu, copy.deepcopy(cpu).to("tpu")


def tokens(shape, seed=0):
    return torch.randint(3, 256, shape, generator=torch.Generator().manual_seed(seed))


def compare_training_step(cpu, tpu, **inputs):
    """One forward and backward on each: loss, logits and every gradient."""
    fallbacks = torch_tpu.metrics()["fallbacks"]
    cpu.train()
    tpu.train()
    out_cpu = cpu(**inputs)
    out_tpu = tpu(**{k: v.to("tpu") for k, v in inputs.items()})
    assert_close(out_tpu.logits.cpu(), out_cpu.logits, rtol=1e-4, atol=1e-4)
    assert_close(out_tpu.loss.cpu(), out_cpu.loss, rtol=1e-5, atol=1e-5)
    out_cpu.loss.backward()
    out_tpu.loss.backward()
    checked = 0
    for (name, p_tpu), p_cpu in zip(tpu.named_parameters(), cpu.parameters()):
        if p_cpu.grad is None:
            assert p_tpu.grad is None, name
            continue
        assert p_tpu.device.type == "tpu", name
        assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-3, atol=1e-4, msg=lambda m, n=name: "%s: %s" % (n, m))
        checked += 1
    assert checked > 4
    assert torch_tpu.metrics()["fallbacks"] == fallbacks, torch_tpu.metrics()["fallback_ops"]


@pytest.mark.parametrize("model_type", sorted(CAUSAL_LMS))
def test_causal_lm_trains_and_generates_as_on_cpu(model_type):
    cpu, tpu = build(AutoModelForCausalLM, model_type, **CAUSAL_LMS[model_type])
    ids = tokens((2, 16))
    compare_training_step(cpu, tpu, input_ids=ids, labels=ids)
    cpu.eval()
    tpu.eval()
    prompt = tokens((2, 6), seed=1)
    mask = torch.ones_like(prompt)
    expected = cpu.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    got = tpu.generate(prompt.to("tpu"), attention_mask=mask.to("tpu"), max_new_tokens=6, do_sample=False,
                       pad_token_id=0)
    assert got.device.type == "tpu"
    assert torch.equal(got.cpu(), expected)


def test_tied_embedding_and_head_stay_tied():
    _, tpu = build(AutoModelForCausalLM, "gpt2", **CAUSAL_LMS["gpt2"])
    assert tpu.lm_head.weight is tpu.transformer.wte.weight


def test_masked_lm_bert():
    cpu, tpu = build(AutoModelForMaskedLM, "bert", num_hidden_layers=2, num_attention_heads=2, hidden_size=64,
                     intermediate_size=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **SMALL)
    ids = tokens((2, 12))
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    compare_training_step(cpu, tpu, input_ids=ids, token_type_ids=torch.zeros_like(ids), labels=labels)


def test_seq2seq_t5():
    cpu, tpu = build(AutoModelForSeq2SeqLM, "t5", num_layers=2, num_heads=2, d_model=64, d_kv=32, d_ff=128,
                     vocab_size=256, dropout_rate=0.0, decoder_start_token_id=0)
    ids, labels = tokens((2, 10)), tokens((2, 7), seed=2)
    compare_training_step(cpu, tpu, input_ids=ids, labels=labels)
    cpu.eval()
    tpu.eval()
    expected = cpu.generate(ids, max_new_tokens=5, do_sample=False)
    assert torch.equal(tpu.generate(ids.to("tpu"), max_new_tokens=5, do_sample=False).cpu(), expected)


def test_from_pretrained_with_device_map_tpu(tmp_path):
    cpu, _ = build(AutoModelForCausalLM, "llama", num_key_value_heads=2, **DECODER)
    cpu.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="tpu")
    assert {p.device.type for p in loaded.parameters()} == {"tpu"}
    ids = tokens((1, 8))
    with torch.no_grad():
        assert_close(loaded(ids.to("tpu")).logits.cpu(), cpu(ids).logits, rtol=1e-4, atol=1e-4)


def test_generate_in_fused_mode():
    cpu, tpu = build(AutoModelForCausalLM, "llama", num_key_value_heads=2, **DECODER)
    prompt = tokens((1, 5))
    expected = cpu.eval().generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch_tpu.eager_mode("fused"):
        got = tpu.eval().generate(prompt.to("tpu"), max_new_tokens=8, do_sample=False, pad_token_id=0)
        assert torch.equal(got.cpu(), expected)



# ------------------------------------------------------------ the report over every causal LM
# (python -m torch_tpu.tools.hf_report; CI runs this slice of it)

@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_static_cache_generate_compiles_one_decode_program_for_every_prompt(mode):
    """Transformers compiles the decode step on tpu itself (backend "tpu", static shapes)
    when the cache is static. With one cache size and prompts left-padded to a multiple
    of 16, a new prompt or output length compiles nothing: one decode program, and the
    prefill's programs once per padded length."""
    from transformers import StaticCache
    from torch_tpu import _compile
    cpu, tpu = build(AutoModelForCausalLM, "llama", **CAUSAL_LMS["llama"])
    cpu.generation_config.pad_token_id = tpu.generation_config.pad_token_id = 0
    torch._dynamo.reset()

    def generate(model, ids, new, device):
        pad = -ids.shape[1] % 16
        ids = torch.nn.functional.pad(ids, (pad, 0))
        mask = (torch.arange(ids.shape[1]) >= pad).long().expand_as(ids)
        cache = StaticCache(config=model.config, max_cache_len=64)
        return model.generate(ids.to(device), attention_mask=mask.to(device), cache=cache,
                              max_new_tokens=new, do_sample=False, min_new_tokens=new).cpu()

    with torch_tpu.eager_mode(mode):
        before = _compile.stats()["compiled_graphs"]
        for length, new in ((5, 8), (12, 12), (20, 8), (9, 12), (30, 8)):
            if length == 9:  # both padded lengths (16, 32) and both output lengths seen
                programs = torch_tpu.metrics()["compiles"]
                graphs = _compile.stats()["compiled_graphs"]
            ids = tokens((2, length), seed=length)
            assert torch.equal(generate(tpu, ids, new, "tpu"), generate(cpu, ids, new, "cpu"))
        assert graphs - before == 1  # the decode step
        assert _compile.stats()["compiled_graphs"] == graphs
        assert torch_tpu.metrics()["compiles"] == programs
    torch._dynamo.reset()


def test_report_runs_a_mixture_of_experts_model_natively():
    # afmoe: a zero-initialised router (hence the report's jitter), tokens sorted per expert,
    # counted with an integer histc and multiplied with torch._grouped_mm, as off the CPU.
    from torch_tpu.tools import hf_report

    progress = []
    record = hf_report.run_model("afmoe", "strict", progress=progress.append)
    assert record["status"] == "native", record
    assert record["matched_by_float64"] == []
    # what the record says if the process dies: first while on CPU, then during the tpu run
    assert [p["status"] for p in progress] == ["config", "errors"]


# One type of each family after causal LM, with the inputs of its kind (text ids, class
# labels, pixel values, raw audio): the report's slice across families.
@pytest.mark.parametrize("model_type, family", [
    ("t5", "seq2seq-lm"), ("albert", "masked-lm"), ("canine", "sequence-classification"),
    ("vit", "image-classification"), ("resnet", "image-classification"), ("wav2vec2", "audio-classification"),
])
def test_report_runs_a_model_of_each_family_natively(model_type, family):
    from torch_tpu.tools import hf_report

    record = hf_report.run_model(model_type, "strict")
    assert (record["family"], record["status"]) == (family, "native"), record


def test_report_cpu_mode_builds_and_runs_on_cpu_alone(tmp_path):
    # --mode cpu: which types build tiny and run on CPU (and CPU's message where not), no tpu run
    from torch_tpu.tools import hf_report

    before = torch_tpu.metrics()["executions"]
    record = hf_report.run_model("gpt2", "cpu")
    assert record["status"] == "builds" and record["parameters"] > 0, record
    assert torch_tpu.metrics()["executions"] == before
    failed = {"model": "rwkv", "family": "causal-lm", "mode": "cpu", "status": "config", "error": "CPU's message"}
    assert hf_report.summarize([record, failed]) == (dict({s: 0 for s in hf_report.STATUSES}, builds=1), 1)
    text = hf_report.markdown([record, failed], "cpu", "x")
    assert "| causal-lm | 1 | 1 |" in text and "builds 1 of 1 models" in text
    # a config validator's reason is on its message's second line: the record keeps it
    refusal = ValueError("Class validation error for validator 'check':\n    ValueError: a must equal b")
    assert hf_report._error_line(refusal) == "ValueError: Class validation error for validator 'check': ValueError: a must equal b"


def test_report_shrinks_nested_configs_as_a_whole():
    # A multimodal type's vision tower and text model are configs of their own: each is
    # shrunk with the same sizes, so that the model builds tiny and counts.
    from torch_tpu.tools import hf_report

    config = hf_report.tiny_config("llava")
    assert config.text_config.hidden_size == config.vision_config.hidden_size == hf_report.TINY["hidden_size"]
    assert config.text_config.num_hidden_layers == config.vision_config.num_hidden_layers == 2
    assert config.text_config.vocab_size == hf_report.TINY["vocab_size"]
    # a causal LM's too (Gemma 3: a vision tower beside its text model)
    assert hf_report.family_of("gemma3").name == "causal-lm"
    config = hf_report.tiny_config("gemma3")
    assert config.text_config.hidden_size == config.vision_config.hidden_size == hf_report.TINY["hidden_size"]
    assert config.text_config.vocab_size == hf_report.TINY["vocab_size"]


def test_report_builds_a_head_that_takes_a_part_of_a_composite_config_from_that_part():
    # MusicGen Melody's causal LM is its decoder: given the composite config it failed to build;
    # its decoder's config (tiny, one codebook) builds it, and it runs as on CPU
    from torch_tpu.tools import hf_report

    family = hf_report.family_of("musicgen_melody")
    config, head = hf_report._head_config(family, hf_report.tiny_config("musicgen_melody"))
    assert head.__name__ == "MusicgenMelodyForCausalLM" and isinstance(config, head.config_class)
    assert config.num_codebooks == 1 and config.hidden_size == hf_report.TINY["hidden_size"]
    assert hf_report._head_config(hf_report.family_of("llama"), hf_report.tiny_config("llama"))[1] is None
    record = hf_report.run_model("musicgen_melody", "strict")
    assert record["status"] == "native", record


def test_report_fits_multimodal_rotary_sections_to_the_tiny_head():
    # Qwen2-VL and kin split each head's rotary frequencies into time, height and width
    # sections sized for the default head; their sum must be half the tiny head's rotary dims.
    from torch_tpu.tools import hf_report

    # (Cosmos 3 Edge's config checks the sum when it is made: the sections are fitted before;
    # HY V4 VL's latent attention rotates qk_rope_head_dim of each head)
    for model_type in ("qwen2_vl", "glm4v_moe_text", "cosmos3_edge_text", "hy_v4_vl_text"):
        config = hf_report.tiny_config(model_type)
        text = getattr(config, "text_config", config)
        head_dim = getattr(text, "qk_rope_head_dim", None) or getattr(text, "head_dim", None) or \
            text.hidden_size // text.num_attention_heads
        factor = text.rope_parameters.get("partial_rotary_factor") or getattr(text, "partial_rotary_factor", 1.0)
        assert sum(text.rope_parameters["mrope_section"]) == int(head_dim * factor) // 2, model_type
    assert "mrope_section" not in hf_report.tiny_config("llava").text_config.rope_parameters
    # axial rotary parameters, and those per layer kind, are left as they are (their configs refuse sections)
    config = hf_report.tiny_config("cohere_compass")
    assert "mrope_section" not in config.vision_config.rope_parameters
    assert all("mrope_section" not in kind for kind in config.text_config.rope_parameters.values())


@pytest.mark.parametrize("model_type, fed", [("llava", {"input_ids"}), ("aimv2_vision_model", {"pixel_values"}),
                                              ("chinese_clip", {"input_ids", "pixel_values"})])
def test_report_runs_a_base_model_on_its_main_input(model_type, fed):
    # A type with no head of the other families: its base model (AutoModel), fed its main
    # input (a dual encoder its images too; a VLM's ids alone, as they hold no image
    # token), trained on the mean of its floating outputs, against CPU.
    from torch_tpu.tools import hf_report

    assert hf_report.family_of(model_type).name == "base-model"
    config = hf_report.tiny_config(model_type)
    import transformers
    inputs = hf_report.make_inputs(hf_report.family_of(model_type), config, transformers.AutoModel.from_config(config))
    assert {k for k in inputs if k in ("input_ids", "pixel_values", "input_values")} == fed
    assert "labels" not in inputs
    record = hf_report.run_model(model_type, "strict")
    assert (record["family"], record["status"]) == ("base-model", "native"), record


# Inputs of the kinds a base model's main input names: a Qwen-VL-style vision tower's
# flattened patches with their grids, a video model's frames, an audio codec's mono waveform
# (batch, channels, samples), a time series' past values with their observed mask; log-mel
# features as (mels, frames) where a convolution over the mel bins reads them first, with a
# padding mask (Gemma 3n's, True where padded); the inputs a forward needs beside its main
# one: word boxes (BROS), detected regions (LXMERT), a Q-Former's queries and image features.
@pytest.mark.parametrize("model_type, shapes", [
    ("qwen2_5_vl_vision", {"hidden_states": (2 * 16, 3 * 2 * 14 * 14), "grid_thw": (2, 3)}),
    ("videomae", {"pixel_values": (2, 16, 3, 32, 32)}),
    ("encodec", {"input_values": (2, 1, 16000)}),
    ("patchtst", {"past_values": (2, 32, 1), "past_observed_mask": (2, 32, 1)}),
    ("glmasr_encoder", {"input_features": (2, 128, 64)}),
    ("gemma3n_audio", {"audio_mel": (2, 64, 128), "audio_mel_mask": (2, 64)}),
    ("bros", {"input_ids": (2, 16), "bbox": (2, 16, 4)}),
    ("lxmert", {"input_ids": (2, 16), "visual_feats": (2, 4, 2048), "visual_pos": (2, 4, 4)}),
    ("blip_2_qformer", {"input_ids": (2, 16), "query_embeds": (2, 4, 64), "encoder_hidden_states": (2, 4, 64)}),
])
def test_report_feeds_a_base_model_inputs_of_its_kind(model_type, shapes):
    import transformers
    from torch_tpu.tools import hf_report

    config = hf_report.tiny_config(model_type)
    inputs = hf_report.make_inputs(hf_report.family_of(model_type), config, transformers.AutoModel.from_config(config))
    assert {k: tuple(v.shape) for k, v in inputs.items() if isinstance(v, torch.Tensor)} == shapes
    record = hf_report.run_model(model_type, "strict")
    assert (record["family"], record["status"]) == ("base-model", "native"), record


def test_report_keeps_special_token_ids_within_the_tiny_vocabulary():
    # a CTC head's blank class, as padding and the rest, must be a class of the tiny vocabulary
    from torch_tpu.tools import hf_report

    config = hf_report.tiny_config("nemo_speechlm").word_timestamp_config
    assert config.blank_token_id < config.vocab_size == hf_report.TINY["vocab_size"]


def test_report_shrinks_a_size_a_config_keeps_per_axis_or_stage():
    # Hiera's image size is (height, width), CvT's embedding width one per stage: the tiny
    # size for each, in the container the config's type checks ask for
    from torch_tpu.tools import hf_report

    assert list(hf_report.tiny_config("hiera").image_size) == [32, 32]
    assert list(hf_report.tiny_config("cvt").embed_dim) == [16, 16, 16]


def test_report_resumes_and_runs_types_side_by_side(tmp_path, monkeypatch):
    # --jobs runs types at a time; --resume keeps the records of that mode already written
    # and runs only the types they lack; the JSON is written after each type.
    from torch_tpu.tools import hf_report

    ran = []

    def fake(model_type, mode, timeout):
        ran.append(model_type)
        return {"model": model_type, "mode": mode, "status": "native"}

    monkeypatch.setattr(hf_report, "_run_in_subprocess", fake)
    assert hf_report.main(["--models", "a,b,c", "--jobs", "2", "--out-dir", str(tmp_path)]) == 0
    assert sorted(ran) == ["a", "b", "c"]
    ran.clear()
    assert hf_report.main(["--models", "a,b,c,d", "--resume", "--out-dir", str(tmp_path)]) == 0
    assert ran == ["d"]
    report = json.loads((tmp_path / "hf_models.json").read_text())
    assert [r["model"] for r in report["models"]] == ["a", "b", "c", "d"]
    ran.clear()  # another mode's records are not this mode's
    assert hf_report.main(["--models", "a", "--resume", "--mode", "fused", "--out-dir", str(tmp_path)]) == 0
    assert ran == ["a"]


def test_report_runs_a_model_compiled():
    # compile mode: forward (and with it backward) through torch.compile(backend="tpu"),
    # generate's decode steps too; graph breaks allowed and counted
    from torch_tpu.tools import hf_report

    record = hf_report.run_model("llama", "compile")
    assert record["status"] == "native", record
    assert record["compiled_graphs"] > 0 and record["graph_breaks"] == 0
    assert record["layout_copies"] == {}  # every lowering lays its results out as the fake tensors


def test_report_compile_mode_counts_a_zero_gradient_as_eager_none():
    # AOTAutograd gives a parameter reaching only an output the loss leaves unused (an
    # encoder's pooler) a zero gradient where eager leaves None; a nonzero one still differs
    from torch_tpu.tools import hf_report

    expected = (None, None, {"used": torch.ones(2)}, None)
    got = (None, None, {"used": torch.ones(2), "pooler": torch.zeros(2), "other": torch.tensor([0.0, 1.0])}, None)
    kept = hf_report._without_zero_grads_eager_leaves_unset(got, expected)
    assert sorted(kept[2]) == ["other", "used"]
    assert hf_report._compare(kept, expected, lambda: None)[0].startswith("gradients for different parameters")


def test_report_compile_mode_takes_cpu_compiled_as_reference_where_eager_differs():
    # PaliGemma builds its attention mask otherwise when compiled: CPU eager and CPU under
    # torch.compile(backend="aot_eager") differ by ~1 in the logits; tpu compiled matches the latter
    from torch_tpu.tools import hf_report

    record = hf_report.run_model("paligemma", "compile")
    assert record["status"] == "native" and "CPU compiled" in record["reference"], record


def test_report_records_topk_in_eager_code_only():
    # Dynamo traces the recorder's copies as side effects of the graph (glm4v_moe_text then
    # failed inside Dynamo): compiled code's topk calls are left unrecorded.
    from torch_tpu.tools import hf_report

    def f(x):
        return torch.topk(x, 2).values * 2

    x = torch.randn(4, 8, device="tpu")
    with hf_report._TopkRecorder() as recorder:
        torch.compile(f, backend="tpu")(x)
        assert recorder.calls == []
        f(x)
    assert len(recorder.calls) == 1


def test_report_keeps_models_cpu_cannot_build_out_of_the_count(tmp_path):
    from torch_tpu.tools import hf_report

    assert hf_report.main(["--models", "no_such_model,gpt2", "--out-dir", str(tmp_path)]) == 0
    records = {r["model"]: r for r in json.loads((tmp_path / "hf_models.json").read_text())["models"]}
    assert records["no_such_model"]["status"] == "config"
    assert records["gpt2"]["status"] == "native", records["gpt2"]
    text = (tmp_path / "hf_models.md").read_text()
    assert "native 1, fallback 0, fails 0, errors 0 of 1 models built on CPU" in text
    assert "config (not built or not run on CPU, not counted) 1" in text


def test_report_counts_the_ops_that_fall_back_across_models():
    from torch_tpu.tools import hf_report

    records = [{"model": "a", "status": "fallback", "fallback_ops": {"aten::x": 3, "aten::y": 1}},
               {"model": "b", "status": "fallback", "fallback_ops": {"aten::y": 5}},
               {"model": "c", "status": "native"}]
    assert hf_report.fallback_histogram(records) == [{"op": "aten::y", "models": 2, "calls": 6},
                                                     {"op": "aten::x", "models": 1, "calls": 3}]
    text = hf_report.markdown(records, "strict", "0")
    assert "| aten::y | 2 | 6 |" in text and text.index("aten::y | 2") < text.index("aten::x | 1")
    assert "Ops that fall back" not in hf_report.markdown(records[2:], "strict", "0")


def test_report_leaves_out_a_config_it_could_not_shrink(monkeypatch):
    from torch_tpu.tools import hf_report

    monkeypatch.setattr(hf_report, "MAX_PARAMETERS", 1000)
    record = hf_report.run_model("gpt2", "strict")
    assert record["status"] == "config" and "parameters after shrinking the config" in record["error"]


def test_report_shrinks_a_hybrid_layer_pattern_to_one_layer_of_each_kind():
    # qwen3_next's default: three linear-attention layers, then a full-attention one, 48
    # layers; its first two alone leave generate no attention layer to size its cache by.
    from torch_tpu.tools import hf_report

    config = hf_report.tiny_config("qwen3_next")
    assert config.num_hidden_layers == 2
    assert config.layer_types == ["linear_attention", "full_attention"]
    # lists of one kind per layer are shrunk alike, kept as long as the model
    config = hf_report.tiny_config("bailing_hybrid")
    assert len(config.layer_types) == len(config.mlp_layer_types) == config.num_hidden_layers
    assert set(config.mlp_layer_types) == {"dense", "sparse"}


def test_report_keeps_latent_attention_dimensions_consistent():
    # DeepSeek V3.2: head_dim derives from the rotary dims, and its keys have as many heads as
    # its queries (multi-head, as its default is; the indexer's mask assumes it).
    from torch_tpu.tools import hf_report

    config = hf_report.tiny_config("deepseek_v32")
    assert config.head_dim == config.qk_rope_head_dim == hf_report.TINY["qk_rope_head_dim"]
    assert config.num_key_value_heads == config.num_attention_heads == hf_report.TINY["num_attention_heads"]
    # a type whose config refuses a generic size: the override leaves it out
    config = hf_report.tiny_config("prophetnet")
    assert config.num_encoder_layers == config.num_decoder_layers == 2


def test_report_runs_a_hybrid_linear_attention_model_natively():
    # bamba: Mamba-2 layers beside an attention layer (placed by the report's override), with
    # the hybrid cache that generate fills.
    from torch_tpu.tools import hf_report

    record = hf_report.run_model("bamba", "strict")
    assert record["status"] == "native", record


def test_report_names_topk_tie_order_as_the_cause_of_a_difference():
    # picks of equal score (the relu'd zeros of a sparse-attention indexer) are both right
    from torch_tpu.tools import hf_report

    scores = torch.tensor([[3.0, 0.0, 0.0, 1.0]])
    cpu = [(scores, torch.tensor([[0, 3, 2]]), -1)]
    tied = [(scores.to("tpu"), torch.tensor([[0, 3, 1]]).to("tpu"), -1)]
    assert hf_report._tie_order_call(cpu, tied) == 0
    not_tied = [(scores.to("tpu"), torch.tensor([[0, 1, 2]]).to("tpu"), -1)]
    assert hf_report._tie_order_call(cpu, not_tied) is None
    other_scores = [(torch.tensor([[3.0, 0.0, 0.5, 1.0]]).to("tpu"), torch.tensor([[0, 3, 1]]).to("tpu"), -1)]
    assert hf_report._tie_order_call(cpu, other_scores) is None
    assert hf_report._tie_order_call(cpu, cpu) is None  # the same picks: no tie to name
    # scores one rounding step apart, which the other engine's rounding ordered the other way
    near = torch.tensor([[1.0, 0.5, 0.50000006, 0.1]])
    cpu = [(near, torch.tensor([[0, 2, 1]]), -1)]
    rounded = [(torch.tensor([[1.0, 0.50000006, 0.5, 0.1]]).to("tpu"), torch.tensor([[0, 1, 2]]).to("tpu"), -1)]
    assert hf_report._tie_order_call(cpu, rounded) == 0
    assert hf_report._tie_order_call([(near, torch.tensor([[0, 2]]), -1)],  # the other of the two taken
                                     [(rounded[0][0], torch.tensor([[0, 1]]).to("tpu"), -1)]) == 0
    # the same scores ordered otherwise: no rounding to blame
    assert hf_report._tie_order_call(cpu, [(near.to("tpu"), torch.tensor([[0, 1, 2]]).to("tpu"), -1)]) is None
    # masked scores (-inf, a causal indexer's future keys) tie too, and do not hide the others' rounding
    masked = torch.tensor([[2.0, float("-inf"), float("-inf"), 1.0]])
    cpu = [(masked, torch.tensor([[0, 3, 1]]), -1)]
    assert hf_report._tie_order_call(cpu, [(masked.to("tpu"), torch.tensor([[0, 3, 2]]).to("tpu"), -1)]) == 0
    assert hf_report._tie_order_call(cpu, [(masked.to("tpu"), torch.tensor([[3, 0, 1]]).to("tpu"), -1)]) is None
