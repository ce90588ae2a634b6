"""Hugging Face model report: every architecture of the installed transformers that has
a head of a reported family, built tiny and random, trained one step (and generating, where
it generates) on CPU and on tpu.

Families, each type reported with the first that lists it (FAMILIES): causal LM, seq2seq
LM, masked LM, sequence classification (text), image classification (pixel values),
audio classification (raw audio values), and, for a type with no head of those, its base
model (`AutoModel`) fed its main input (token ids, pixel values, audio values or features),
trained on the mean of each of its floating outputs. For each model type a small config is made
from the type's default one (2 layers,
hidden size 64, 4 heads, vocabulary 256, dropout 0, and fewer experts where there are
experts), the model is built on CPU with a fixed seed, its parameters get a little
seeded noise (see `jitter`), and it is copied to tpu. Both copies
then run a forward pass with labels (logits and loss), the backward pass (every
parameter's gradient) and, for the LM families, a greedy `generate` of 4 tokens, and the tpu results are
compared with CPU's (a value outside the tolerance also matches when its error against
the same model run in float64 on CPU is at most twice CPU's own). Each model type is
classified:

  native    everything matches with TORCH_TPU_FALLBACK=error
  fallback  needs the CPU fallback (the ops are listed) and matches with it allowed
  fails     a value differs from CPU's (the largest difference is named)
  errors    the tpu run raised where CPU's did not, crashed, or ran past the time limit
  config    the tiny model could not be built or run on CPU, or the config kept more
            than MAX_PARAMETERS parameters (a nested config not shrunk): not counted

    python -m torch_tpu.tools.hf_report [--models gpt2,llama | --families masked-lm,...]
        [--mode strict|fused|compile] [--timeout 300] [--out-dir reports] [--jobs 2] [--resume]

writes <out-dir>/hf_models.json and <out-dir>/hf_models.md (rewritten after each type); the
last printed line is `native: N/M models (P%)`. Each model type runs in its own process,
`--jobs` of them at a time; `--resume` keeps the records of that mode already in the JSON
and runs only the types it lacks.
"""
import argparse
import collections
import concurrent.futures
import copy
import functools
import inspect
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from torch_tpu.tools.opinfo_report import _first_line, _is_fallback_error, fallback_mode

STATUSES = ("native", "fallback", "fails", "errors")
# Attribute names as the configs spell them (or alias them through attribute_map); only
# those a type's default config has are set.
TINY = {
    "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128, "head_dim": 16,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
    # multi-head latent attention (DeepSeek and kin)
    "q_lora_rank": 32, "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "n_group": 1, "topk_group": 1, "rotary_dim": 8,
    # sparse-attention indexers (DeepSeek V3.2 and kin)
    "index_head_dim": 16, "index_n_heads": 2, "index_topk": 8,
}
# Further sizes for the families after causal LM (kept apart so that the causal-LM report's
# configs stay as they were measured).
TINY_OTHER_FAMILIES = {
    # encoders and seq2seq models spelled otherwise (T5 and kin)
    "d_model": 64, "d_ff": 128, "d_kv": 16, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4,
    # vision: a small image, a few channels per stage, one block per stage
    "image_size": 32, "embed_dim": 16, "hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1],
    # a vision tower's projection into the text model (GLM-4V and kin): the tiny hidden size
    "out_hidden_size": 64,
    # audio: a short feature encoder
    "conv_dim": [32, 32], "conv_stride": [5, 2], "conv_kernel": [10, 3], "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 4,
    # sizes of their own names that leave a model over MAX_PARAMETERS otherwise
    "entity_vocab_size": 256, "upsample_initial_channel": 32, "projection_hidden_dim": 64, "text_hidden_size": 64,
    "projector_hidden_size": 64, "merged_hidden_size": 64,
}
# A list-valued size keeps the default's length: the tiny list is cut or its last item repeated.
LIST_SIZES = ("hidden_sizes", "depths", "conv_dim", "conv_stride", "conv_kernel")
# Per-stage head counts (Swin, PVT, SegFormer, ...) where a config keeps them in a list: one
# head per 16 channels of the stages above.
STAGE_HEADS = [1, 2, 4, 8]
_INKLING2 = {"unpadded_vocab_size": 256, "swa_num_attention_heads": 4, "swa_num_key_value_heads": 2, "swa_head_dim": 16,
             "sliding_window_size": 8, "rel_extent": 16, "d_rel": 8, "n_layers_per_attn_res_block": 1}
def _tiny_flow_head(model_type, class_name):
    """A TTS model's flow head conditioned on the tiny backbone's width (the head's config has
    no model type of its own to shrink it by)."""
    return lambda: _config_class(model_type, class_name)(hidden_size=TINY["hidden_size"], num_hidden_layers=2,
                                                         condition_dim=TINY["hidden_size"])


_WAVTOKENIZER = {"codebook_dim": 64, "codebook_size": 256, "decoder_hidden_size": 64, "decoder_intermediate_size": 128}
_EFFICIENTNET_B7_SCALED_DOWN = {"width_coefficient": 0.25, "depth_coefficient": 0.25, "hidden_dim": 320}
# Types whose default config the generic shrinking above does not fit: constructor arguments
# added to (or replacing) the generic ones; None removes a generic size the type's config refuses.
OVERRIDES = {
    "audio-spectrogram-transformer": {"max_length": 64, "num_mel_bins": 32},  # spectrogram frames and bins
    "autoformer": {"prediction_length": 4, "context_length": 8, "label_length": 4},
    "bamba": {"attn_layer_indices": [1]},
    "bit": {"num_groups": 8},  # group norm over the tiny stages' 16 channels
    "blip_2_qformer": {"encoder_hidden_size": 64},  # the vision tower's (tiny) width
    "blt": {"encoder_hash_byte_group_vocab": 256},
    # the decoder's vocabulary must equal the composite's, and the composite is shrunk first
    "canary": {"vocab_size": None}, "canary_decoder": {"vocab_size": None},
    # CSM: a text vocabulary beside the audio one; its depth decoder reads the backbone's width
    "csm": {"text_vocab_size": 256, "audio_token_id": 250, "audio_eos_token_id": 251},
    "csm_depth_decoder_model": {"backbone_hidden_size": 64},
    "gradium_phonon_tts": {"flow_head_config": _tiny_flow_head("gradium_phonon_tts", "GradiumPhononTTSFlowHeadConfig")},
    "pocket_tts": {"flow_head_config": _tiny_flow_head("pocket_tts", "PocketTTSFlowHeadConfig")},
    "glm5_next_text": {"index_kpool": 4, "qk_rope_head_dim": 0, "qk_nope_head_dim": 16},  # NoPE; kpool divides top-k 8
    "mistral_large4_text": {"kv_source_layers": [0, 1]},  # each of the two layers its own keys and values
    "muse_spark_audio": {"num_hidden_layers": None},  # one per stage of its per-stage lists
    # HGNet V2 (D-FINE's backbone too): each stage's input is the last one's output
    "hgnet_v2": {"stem_channels": [3, 16, 32], "stage_in_channels": [32, 32, 64, 128],
                 "stage_mid_channels": [16, 32, 64, 64], "stage_out_channels": [32, 64, 128, 128],
                 "stage_numb_of_layers": [2, 2, 2, 2], "hidden_sizes": [32, 64, 128, 128]},
    # the tiny backbone's last three stages; queries among the tiny image's few tokens
    "d_fine": {"encoder_in_channels": [64, 128, 128], "num_queries": 8}, "deimv2": {"num_queries": 8},
    "chameleon": {"vocabulary_map": {"<image>": 255}},  # the pretrained tokenizer's map: text alone here
    "chameleon_vqgan": {"num_embeddings": 256, "latent_channels": 32, "base_channels": 32, "num_res_blocks": 1},
    "cohere_compass_text": {"rope_parameters": {kind: {"rope_type": "default", "rope_theta": 10000.0}
                                                for kind in ("full_attention", "sliding_attention")}},
    # num_hidden_layers is their number of stages, which must match the stage lists
    "convnext": {"num_hidden_layers": None}, "convnextv2": {"num_hidden_layers": None},
    "dac": {"encoder_hidden_size": 8, "decoder_hidden_size": 64},  # doubled at each of 4 strides
    "dbrx": {"d_model": 64, "n_heads": 4, "n_layers": 2, "max_seq_len": 128,
             "attn_config": lambda: _config_class("dbrx", "DbrxAttentionConfig")(kv_n_heads=1, rope_theta=10000.0,
                                                                                   clip_qkv=8.0),
             "ffn_config": lambda: _config_class("dbrx", "DbrxFFNConfig")(ffn_hidden_size=128, moe_num_experts=4,
                                                                          moe_top_k=2)},
    "deepseek_v2": {"num_experts_per_tok": 2},
    "donut-swin": {"window_size": 1},  # attention windows within the tiny image's patches
    "dots1": {"n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1},
    "efficientnet": _EFFICIENTNET_B7_SCALED_DOWN, "align_vision_model": _EFFICIENTNET_B7_SCALED_DOWN,
    "align": {"projection_dim": 80},  # the scaled-down vision tower's last channels (320 x 0.25)
    "esm": {"vocab_size": 256},  # unset in the default config
    "funnel": {"num_hidden_layers": None, "block_sizes": [1, 1, 1]},
    "gemma3n_text": {"num_kv_shared_layers": 0, "intermediate_size": 128, "hidden_size_per_layer_input": 16,
                     "vocab_size_per_layer_input": 256, "laurel_rank": 8, "activation_sparsity_pattern": [0.0, 0.0]},
    "granitemoehybrid": {"layer_types": ["mamba", "attention"], "mamba_n_heads": 8, "mamba_d_head": 16,
                         "mamba_d_state": 16, "mamba_chunk_size": 16},
    "grounding-dino": {"num_queries": 8}, "mm-grounding-dino": {"num_queries": 8},  # of the tiny image's few tokens
    "informer": {"prediction_length": 4},
    "inkling2_loop_text": _INKLING2,
    "inkling2_text": _INKLING2,
    "instructblip_qformer": {"encoder_hidden_size": 64},
    "instructblipvideo_qformer": {"encoder_hidden_size": 64},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    "kosmos-2": {"latent_query_num": 4},  # image tokens within the report's 16
    # layout embeddings: four coordinates and two sizes fill the hidden size (LiLT: a sixth each)
    "layoutlmv3": {"coordinate_size": 10, "shape_size": 12},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    "lilt": {"hidden_size": 48},
    "longcat_flash": {"num_layers": 2, "ffn_hidden_size": 128, "expert_ffn_hidden_size": 32, "moe_topk": 2,
                      "zero_expert_num": 2, "head_dim": 8},
    "mamba2": {"num_heads": 8, "n_groups": 1, "chunk_size": 16},
    # Apertus 1.5's tokenizers: no projection around the audio quantizer (its width is the hidden size)
    "wavtokenizer_encoder": _WAVTOKENIZER, "wavtokenizer": _WAVTOKENIZER,
    "apertus1p5_vision_tokenizer": {"codebook_size": 256, "latent_channels": 32, "base_channels": 32, "embed_dim": 32,
                                    "num_res_blocks": 1},  # group norms of 32 groups
    # codec decoders upsample in groups of their default width
    "mimi": {"upsample_groups": 64, "num_filters": 4}, "mimi_decoder": {"upsample_groups": 64},
    "mobilebert": {"embedding_size": 32, "intra_bottleneck_size": 32},
    "mobilevitv2": {"image_size": 64},  # its five halvings leave a 2x2 map for the 2x2 patches
    # a codec decoder as Mimi's: upsampled in groups of its default width
    "pocket_tts_audio_tokenizer": {"upsample_groups": 64}, "pocket_tts_audio_tokenizer_decoder": {"upsample_groups": 64},
    "prophetnet": {"num_hidden_layers": None, "num_encoder_layers": 2, "num_decoder_layers": 2},
    "qwen4_exp_text": {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 8,
                       "indexer_compress_ratio": 2, "hc_lowrank": 16, "ple_embed_dim": 64,
                       "ngram_vocab_size_base": 256, "split_ngram_parts": 2},
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    "rt_detr": {"num_queries": 8}, "rt_detr_v2": {"num_queries": 8},
    # Hiera: one block per stage at a sixth of the default widths, each stage's window its whole
    # map, the first block global (the others pool queries)
    "sam2_hiera_det_model": {"hidden_size": 16, "blocks_per_stage": [1, 1, 1, 1], "embed_dim_per_stage": [16, 32, 64, 128],
                             "num_attention_heads_per_stage": [1, 1, 2, 2], "window_size_per_stage": [8, 4, 2, 1],
                             "global_attention_blocks": [0]},
    # its neck reads the tiny Hiera's stages and feeds the tiny mask decoder
    "sam2_vision_model": {"backbone_channel_list": [128, 64, 32, 16], "fpn_hidden_size": 64},
    # a feature encoder of two convolutions, as the other speech models' (13 strides outrun a second of audio)
    "sew": {"conv_dim": [32, 32], "conv_stride": [5, 2], "conv_kernel": [10, 3]},
    "sew-d": {"conv_dim": [32, 32], "conv_stride": [5, 2], "conv_kernel": [10, 3]},
    "squeezebert": {"embedding_size": 64},  # its embedding feeds the first block as is
    "swin": {"window_size": 1},
    "time_series_transformer": {"prediction_length": 4},
    "timesfm": {"context_length": 64, "horizon_length": 32},
    "timesfm2_5": {"context_length": 64, "horizon_length": 32},
    "xlnet": {"max_position_embeddings": None, "d_head": 16},
    "xmod": {"default_language": "en_XX"},  # the language adapter a batch without `lang_ids` takes
    "zamba": {"num_hidden_layers": 4, "attn_layer_period": 2, "attn_layer_offset": 1,
              "layers_block_type": ["mamba", "hybrid"] * 2, "attention_hidden_size": 128,
              "attention_head_dim": 32, "mamba_dt_rank": 8},
    "zaya": {"num_experts_per_tok": 1},
}
# Settings of the sub-config a head is built from (_head_config): MusicGen's decoder reads
# a batch's rows as (batch x codebooks) and the report's batch is 2; generate starts from a token.
_MUSICGEN_DECODER = {"num_codebooks": 1, "pad_token_id": 0, "decoder_start_token_id": 0}
HEAD_CONFIGS = {"musicgen": _MUSICGEN_DECODER, "musicgen_melody": _MUSICGEN_DECODER}
BATCH, SEQ, NEW_TOKENS = 2, 16, 4
# Where a config without mel bins keeps its features' width, first name first.
FEATURE_WIDTHS = ("feature_projection_input_dim", "feature_size", "input_feat_size", "input_feat_per_channel")
# Audio encoders that read several mel frames stacked as one, where their config does not say
# so (num_stacked_frames): Granite Speech 5's input layer takes four.
STACKED_FRAMES = {"granite_speech5_encoder": 4}
# Images larger than the default 32 pixels for types whose configs name no size: text-line
# recognisers whose vertical strides leave nothing of 32 rows.
IMAGE_SIZES = {"pp_ocrv5_mobile_rec": 128, "pp_ocrv5_server_rec": 64, "pp_ocrv6_small_rec": 64, "pp_ocrv6_tiny_rec": 64}
PATCHES_AS_IMAGES = {"kimi_k25_vision"}  # vision towers whose patch embedding does not unflatten patches
# (batch, 1, samples) though their configs say no channels
WAVEFORMS_WITH_CHANNELS = {"dac", "omniasr_audio", "omniasr_ctc", "pe_audio", "pe_audio_encoder", "xcodec"}

AUDIO_SAMPLES = 16000  # a second at 16 kHz: enough frames after every feature encoder's strides
Family = collections.namedtuple("Family", "name mapping auto_class inputs generates")
# In the order a type is looked up: the first family whose mapping (in
# transformers.models.auto.modeling_auto) lists a type is the head it is reported with.
FAMILIES = (
    Family("causal-lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM", "text", True),
    Family("seq2seq-lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM", "text", True),
    Family("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM", "text", False),
    Family("sequence-classification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
           "AutoModelForSequenceClassification", "text-classes", False),
    Family("image-classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
           "AutoModelForImageClassification", "image", False),
    Family("audio-classification", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
           "AutoModelForAudioClassification", "audio", False),
    Family("base-model", "MODEL_MAPPING_NAMES", "AutoModel", "main", False),
)
LOGITS_TOL = dict(rtol=1e-4, atol=1e-4)
GRAD_TOL = dict(rtol=1e-3, atol=1e-4)
MAX_PARAMETERS = 20_000_000
# A whole model's float32 rounding differs with the order of every sum in it: a value outside
# the tolerance still matches when its error against float64 is at most this times CPU's own.
FLOAT64_RULE_FACTOR = 2.0


def causal_lm_types():
    return model_types(["causal-lm"])


def model_types(families=None):
    """The model types of `families` (names; default all), each listed once, sorted."""
    wanted = set(families or [f.name for f in FAMILIES])
    return sorted(t for t, f in _family_by_type().items() if f.name in wanted)


@functools.cache
def _family_by_type():
    from transformers.models.auto import modeling_auto

    found = {}
    for family in FAMILIES:
        for model_type in getattr(modeling_auto, family.mapping):
            found.setdefault(model_type, family)
    return found


def family_of(model_type):
    """The family a type is reported with (causal LM for a type no mapping lists)."""
    return _family_by_type().get(model_type, FAMILIES[0])


def tiny_config(model_type):
    """The type's default config made small, its nested configs too (a vision tower and a
    text model are shrunk as a whole)."""
    from transformers import AutoConfig

    family = family_of(model_type)
    config = _shrunk(AutoConfig.for_model(model_type), model_type, family,
                     lambda sizes: AutoConfig.for_model(model_type, **sizes))
    _shrink_nested(config, family)
    return config


def _shrink_nested(config, family, depth=3):
    """Shrinks, in place, each nested config of `config` (its `sub_configs`), and theirs."""
    from transformers import PretrainedConfig

    for name in list(getattr(config, "sub_configs", None) or {}):
        sub = getattr(config, name, None)
        if not isinstance(sub, PretrainedConfig) or depth == 0:
            continue
        kind = type(sub)
        try:
            small = _shrunk(sub, getattr(sub, "model_type", ""), family,
                            lambda sizes: kind.from_dict(dict(sub.to_dict(), **sizes)))
            setattr(config, name, small)
        # Kept as it was (the size check names it); RuntimeError: a config with per-layer
        # sizes (Gemma 4 and kin) refuses to be read as one.
        except (AttributeError, TypeError, ValueError, RuntimeError):
            continue
        _shrink_nested(small, family, depth - 1)


def _shrunk(default, model_type, family, build):
    """A config like `default` with the tiny sizes it has, made by `build(sizes)`."""
    # Passed to the constructor, so that what a config derives from them (head_dim from the
    # rotary dims, per-layer lists) follows.
    tiny = TINY if family is FAMILIES[0] else dict(TINY, **TINY_OTHER_FAMILIES)
    sizes = {name: value for name, value in tiny.items()
             if getattr(default, name, None) is not None and not _read_only(default, name)}
    for name in LIST_SIZES:
        if name in sizes:
            if not isinstance(getattr(default, name), (list, tuple)):
                del sizes[name]
                continue
            sizes[name] = _as_long_as(sizes[name], getattr(default, name))
    for name, value in sizes.items():  # a size a config keeps per stage or per axis: the same for each
        kept = getattr(default, name)
        if isinstance(kept, (list, tuple)) and kept and not isinstance(value, (list, tuple)):
            sizes[name] = type(kept)([value] * len(kept))
    if tiny is not TINY:
        for name in ("num_heads", "num_attention_heads"):
            if isinstance(getattr(default, name, None), (list, tuple)):
                sizes[name] = _as_long_as(STAGE_HEADS, getattr(default, name))
    # None means "derive it", but some models read head_dim / num_key_value_heads as they are.
    if getattr(default, "qk_rope_head_dim", None) is not None:
        sizes.pop("head_dim", None)  # latent attention derives it from the rotary and other dims
    elif hasattr(default, "head_dim") and default.head_dim is None:
        sizes["head_dim"] = TINY["head_dim"]
    if hasattr(default, "num_key_value_heads") and default.num_key_value_heads is None:
        sizes["num_key_value_heads"] = TINY["num_key_value_heads"]
    if getattr(default, "num_key_value_heads", None) == getattr(default, "num_attention_heads", 0):
        sizes["num_key_value_heads"] = TINY["num_attention_heads"]  # multi-head attention stays so
    sizes.update(_layer_pattern(default, sizes.get("num_hidden_layers")))
    rope = getattr(default, "rope_parameters", None)
    if isinstance(rope, dict) and "mrope_section" in rope:  # a config that checks its sections when made
        head_dim = _rotary_head_size(lambda name: sizes.get(name, getattr(default, name, None)))
        fitted = _fitted_mrope(rope, head_dim, getattr(default, "partial_rotary_factor", None))
        if fitted is not None:
            sizes["rope_parameters"] = fitted
    for name, value in OVERRIDES.get(model_type, {}).items():
        if value is None:
            sizes.pop(name, None)
        else:
            sizes[name] = value() if callable(value) else value
    if getattr(default, "pad_token_id", 0) is None:  # classification of a batch finds its last token by padding
        sizes["pad_token_id"] = 0
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "blank_token_id"):
        token = getattr(default, name, None)
        if isinstance(token, int) and token >= TINY["vocab_size"]:
            sizes[name] = TINY["vocab_size"] - 1
    try:
        config = build(sizes)
    except (TypeError, ValueError):
        config = default

    def shrink(name, value):
        try:
            setattr(config, name, value)
        except (AttributeError, TypeError, ValueError):  # a derived property: left as the config computes it
            pass

    for name, value in sizes.items():  # a constructor that ignored a size (not one that derived another)
        if getattr(config, name, None) == getattr(default, name) != value:
            shrink(name, value)
    if family.name == "seq2seq-lm" and getattr(config, "decoder_start_token_id", None) is None:
        shrink("decoder_start_token_id", getattr(config, "pad_token_id", None) or 0)  # as pretrained T5s set it
    _fit_mrope_sections(config)
    for name in dir(config):  # dropouts off: the comparison needs the same function
        if ("dropout" in name or name.endswith("_pdrop")) and isinstance(getattr(config, name, None), float):
            shrink(name, 0.0)
    return config


def _fit_mrope_sections(config):
    """Multimodal rotary embeddings (Qwen2-VL and kin) split each head's rotary frequencies
    into time, height and width sections, sized in `rope_parameters` for the default head:
    scaled here to the tiny head (their sum is half of it)."""
    rope = getattr(config, "rope_parameters", None)
    if not isinstance(rope, dict) or rope.get("rope_type", "default") != "default" or \
            any(isinstance(v, dict) for v in rope.values()) or not _models_read_mrope_sections(type(config)):
        return  # none, another kind (axial), or one per layer kind: no sections there
    head_dim = _rotary_head_size(lambda name: getattr(config, name, None))
    fitted = _fitted_mrope(rope, head_dim, getattr(config, "partial_rotary_factor", None))
    if fitted is not None:
        config.rope_parameters = fitted


def _rotary_head_size(size):
    """The head size whose rotary part the sections split, given `size(name)`, a config's size:
    latent attention's rotary head, else the head."""
    heads = size("num_attention_heads")
    return size("qk_rope_head_dim") or size("head_dim") or ((size("hidden_size") or 0) // heads if heads else None)


def _fitted_mrope(rope, head_dim, partial_rotary_factor=None):
    """`rope` with its mrope sections scaled to sum to half of `head_dim`'s rotary part; None
    where they already do (or there is no head size)."""
    sections = list(rope.get("mrope_section") or [16, 24, 24])  # the models' own default
    factor = rope.get("partial_rotary_factor") or partial_rotary_factor or 1.0
    half = int(head_dim * factor) // 2 if head_dim else 0
    if not half or sum(sections) == half:
        return None
    scaled = [max(1, s * half // sum(sections)) for s in sections]
    scaled[-1] += half - sum(scaled)
    return dict(rope, mrope_section=scaled)


@functools.cache
def _models_read_mrope_sections(config_class):
    """Whether the modeling code beside `config_class` reads `mrope_section`."""
    import glob

    folder = os.path.dirname(inspect.getsourcefile(config_class) or "")
    for path in glob.glob(os.path.join(folder, "modeling_*.py")):
        with open(path) as f:
            if "mrope_section" in f.read():
                return True
    return False


def _as_long_as(values, default):
    """`values` cut to the length of `default`, or its last item repeated up to it."""
    values = list(values)
    return (values + values[-1:] * len(default))[:len(default)]


def _config_class(model_type, name):
    import importlib

    return getattr(importlib.import_module("transformers.models.%s.configuration_%s" % (model_type, model_type)), name)


def _read_only(config, name):
    """Whether `name` is a property of the config's class without a setter (derived)."""
    attribute = getattr(type(config), name, None)
    return isinstance(attribute, property) and attribute.fset is None


def _layer_pattern(default, layers):
    """Constructor arguments for the per-layer lists of a hybrid architecture (`layer_types`,
    `mlp_layer_types`, ...: lists of names as long as the model): each list becomes one
    layer of each kind it names, in the order they first appear, so that a model cut to a
    few layers still has an attention layer beside its linear-attention or recurrent ones
    (cutting the list instead often left only the latter, and then generate cannot run)."""
    count = getattr(default, "num_hidden_layers", None)
    if not (layers and isinstance(count, int)):
        return {}
    kinds = {name: list(dict.fromkeys(value)) for name, value in vars(default).items()
             if isinstance(value, list) and len(value) == count and count > 1
             and all(isinstance(kind, str) for kind in value)}
    if not kinds:
        return {}
    layers = max([layers] + [len(k) for k in kinds.values()])
    pattern = {name: k + k[-1:] * (layers - len(k)) for name, k in kinds.items()}
    return dict(pattern, num_hidden_layers=layers)


def jitter(model, scale=0.02):
    """Adds N(0, scale) noise to every floating parameter. Some architectures initialise
    a router or gate to zeros, and then every expert ties: which of the tied ones `topk`
    picks is not specified (on afmoe CPU took the last ones, tpu the first), so the comparison would
    measure tie order instead of the backend."""
    import torch

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


def make_inputs(family, config, model=None):
    """The model's keyword inputs with labels (a base model: its main input, no labels),
    made locally (seeded)."""
    import torch

    g = torch.Generator().manual_seed(0)
    if family.inputs == "main":
        return _main_inputs(model, config, g)
    classes = lambda: torch.randint(0, config.num_labels, (BATCH,), generator=g)  # noqa: E731
    if family.inputs in ("image", "audio"):  # as the model's main input says: pixels, a waveform, features, ids
        return dict(_main_inputs(model, config, g), labels=classes())
    ids = torch.randint(1, getattr(config, "vocab_size", None) or 256, (BATCH, SEQ), generator=g)
    if family.inputs == "text-classes":
        return {"input_ids": ids, "labels": classes()}
    # an audio-codebook decoder (MusicGen's, one codebook) takes labels per codebook
    return {"input_ids": ids, "labels": ids.unsqueeze(-1) if getattr(config, "num_codebooks", 0) == 1 else ids}


def _pixels(config, g):
    """A batch of images of the size and channels `config` (an image model's or a vision
    tower's) says; where it names no size (convnets take any), IMAGE_SIZES' or 32 pixels."""
    import torch

    size = getattr(config, "image_size", None) or IMAGE_SIZES.get(config.model_type, 32)
    size = size if isinstance(size, int) else list(size.values() if isinstance(size, dict) else size)[0]
    frames = getattr(config, "num_frames", None)  # a video model: (batch, frames, channels, height, width)
    return torch.randn(BATCH, *([frames] if frames else []), getattr(config, "num_channels", 3), size, size, generator=g)


def _patches(model, g, grid=(1, 4, 4)):
    """A batch of images as a vision tower of the Qwen-VL kind takes them: each image's
    patches flattened (their count from its (time, height, width) grid of patches, which the
    towers merge in 2x2 groups), and the grids. The flattened size is what the tower's patch
    embedding (its first convolution or linear layer) reads; the towers of PATCHES_AS_IMAGES
    take each patch unflattened, as that layer's input."""
    import torch

    embed = next(m for m in model.modules() if isinstance(m, (torch.nn.Conv3d, torch.nn.Conv2d, torch.nn.Linear)))
    count = BATCH * math.prod(grid)
    shape = embed.weight.shape[1:]
    if model.config.model_type not in PATCHES_AS_IMAGES:
        shape = (math.prod(shape),)
    return torch.randn(count, *shape, generator=g), torch.tensor([list(grid)] * BATCH)


def _is_dual_encoder(config):
    """A text model and a vision tower side by side (CLIP-style): the forward takes both
    inputs, each its own; not a VLM, whose ids must hold an image token per image."""
    vision = getattr(config, "vision_config", None)
    return vision is not None and getattr(config, "text_config", None) is not None and not any(
        getattr(config, a, None) is not None for a in ("image_token_id", "image_token_index", "image_token"))


def _main_inputs(model, config, g):
    """A base model's main input (`main_input_name`), with decoder ids where its forward
    takes them, and no cache: its outputs are what it computed. A dual encoder gets its
    images besides its ids; a forward that requires ids or images besides its main input
    gets them too."""
    import torch

    name = getattr(model, "main_input_name", "input_ids")
    accepts = inspect.signature(model.forward).parameters
    required = {k for k, p in accepts.items() if p.default is inspect.Parameter.empty and
                p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size",
                                                            None) or 256
    ids = lambda: torch.randint(1, vocab, (BATCH, SEQ), generator=g)  # noqa: E731
    frames = 64  # of audio features, where the config does not fix them
    if "grid_thw" in required:  # a vision tower fed patches (Qwen-VL and kin)
        patches, grid = _patches(model, g)
        inputs = {"hidden_states" if "hidden_states" in accepts else "pixel_values": patches, "grid_thw": grid}
        if "merge_sizes" in required:
            inputs["merge_sizes"] = torch.ones(BATCH, dtype=torch.long)
        return inputs
    if name == "past_values":
        return _series(config, accepts, g)
    if "spatial_shapes" in accepts and name == "pixel_values":  # images as patch sequences of their own sizes (SigLIP 2)
        return _patch_sequences(config, g)
    if name in ("pixel_values", "pixel_values_videos"):  # images, or a video model's frames
        # a video-text model's frames: its vision tower's
        inputs = {name: _pixels(_vision_tower(config) if name == "pixel_values_videos" else config, g)}
    elif name == "input_values" and getattr(config, "num_mel_bins", None) and getattr(config, "max_length", None):
        inputs = {"input_values": torch.randn(BATCH, config.max_length, config.num_mel_bins, generator=g)}  # a spectrogram
    elif name == "input_values":
        inputs = {"input_values": _waveform(config, g)}
    elif name in ("input_features", "audio_mel"):  # log-mel frames, (frames, mels) or (mels, frames)
        mels = _mel_bins(config)
        if mels is not None and getattr(config, "max_source_positions", None):  # Whisper: as many as it embeds
            frames = 2 * config.max_source_positions
            shape = (BATCH, mels, frames)
        elif mels is not None and getattr(config, "n_window", None):  # Qwen3-ASR: whole windows of 2 * n_window
            frames = 2 * config.n_window
            shape = (BATCH, mels, frames)
        elif mels is not None and _first_layer_is_conv_over(model, mels):  # a conv over the mels
            shape = (BATCH, mels, frames)
        else:
            stacked = getattr(config, "num_stacked_frames", None) or STACKED_FRAMES.get(config.model_type, 1)
            width = mels * stacked if mels else next(
                (getattr(config, n) for n in FEATURE_WIDTHS if getattr(config, n, None)), 80)
            shape = (BATCH, frames, width)
        inputs = {name: torch.randn(*shape, generator=g)}
    else:
        inputs = {name: ids()}
    if "input_values" in required and "input_values" not in inputs:  # audio beside text (PE Audio)
        inputs["input_values"] = _waveform(config, g)
    if "pixel_values" in accepts and "pixel_values" not in inputs and (
            "pixel_values" in required or _is_dual_encoder(config)):
        inputs["pixel_values"] = _pixels(_vision_tower(config), g)
    for other in sorted(required - set(inputs)):  # ids a second encoder reads (InstructBLIP's Q-Former)
        if other.endswith("input_ids"):
            inputs[other] = ids()
    if "input_features_mask" in required:  # every frame is audio
        inputs["input_features_mask"] = torch.ones(BATCH, frames, dtype=torch.long)
    if "audio_mel_mask" in required:  # True marks padding: none (Gemma 3n)
        inputs["audio_mel_mask"] = torch.zeros(BATCH, frames, dtype=torch.bool)
    if "query_embeds" in required:  # a Q-Former as its wrapper runs it: learned queries, image features
        inputs["query_embeds"] = torch.randn(BATCH, 4, config.hidden_size, generator=g)
        inputs["encoder_hidden_states"] = torch.randn(BATCH, 4, config.encoder_hidden_size, generator=g)
    if config.model_type in EXTRA_INPUTS:
        inputs.update(EXTRA_INPUTS[config.model_type](config, g))
    if "decoder_input_ids" in accepts and name != "decoder_input_ids":
        inputs["decoder_input_ids"] = ids()
    if "use_cache" in accepts:
        inputs["use_cache"] = False
    return inputs


def _boxes(config, g):
    """A box per token, (x0, y0, x1, y1) normalised to [0, 1], as document models read words."""
    import torch

    corners = torch.rand(BATCH, SEQ, 2, 2, generator=g).sort(dim=2).values  # [(x0, y0), (x1, y1)]: x0 <= x1, y0 <= y1
    return {"bbox": corners.reshape(BATCH, SEQ, 4)}


def _region_features(config, g, regions=4):
    """Detected regions' features and boxes, as LXMERT takes an image."""
    import torch

    return {"visual_feats": torch.randn(BATCH, regions, config.visual_feat_dim, generator=g),
            "visual_pos": torch.rand(BATCH, regions, config.visual_pos_dim, generator=g)}


def _trajectories(config, g):
    """Decision Transformer's episodes: states, actions, rewards, returns to go, time steps."""
    import torch

    steps = SEQ // 4
    return {"states": torch.randn(BATCH, steps, config.state_dim, generator=g),
            "actions": torch.randn(BATCH, steps, config.act_dim, generator=g),
            "rewards": torch.randn(BATCH, steps, 1, generator=g),
            "returns_to_go": torch.randn(BATCH, steps, 1, generator=g),
            "timesteps": torch.arange(steps).expand(BATCH, steps),
            "attention_mask": torch.ones(BATCH, steps, dtype=torch.long)}


def _latent_image_tokens(config, g):
    """Kosmos-2's text: the image's latent queries take the positions after the first token."""
    import torch

    mask = torch.zeros(BATCH, SEQ, dtype=torch.bool)
    mask[:, 1:1 + config.latent_query_num] = True
    return {"input_ids": torch.randint(1, config.text_config.vocab_size, (BATCH, SEQ), generator=g),
            "image_embeds_position_mask": mask}


def _hidden_sequences(config, g):
    """A speech model without its pre-nets (SpeechT5's base): encoder and decoder take hidden states."""
    import torch

    return {"input_values": torch.randn(BATCH, SEQ, config.hidden_size, generator=g),
            "decoder_input_values": torch.randn(BATCH, SEQ, config.hidden_size, generator=g)}


# Inputs a type's forward needs besides (or instead of) its main input, which its signature does not say.
EXTRA_INPUTS = {
    "bros": _boxes,
    "decision_transformer": _trajectories,
    "kosmos-2": _latent_image_tokens,
    "lxmert": _region_features,
    "speecht5": _hidden_sequences,
    "udop": _boxes,
    "vilt": lambda config, g: {"pixel_values": _pixels(config, g)},
}


def _waveform(config, g):
    """A second of audio; codecs take it with its channels."""
    import torch

    channels = getattr(config, "audio_channels", None) or (1 if config.model_type in WAVEFORMS_WITH_CHANNELS else None)
    return torch.randn(BATCH, *([channels] if channels else []), AUDIO_SAMPLES, generator=g)


def _vision_tower(config):
    """The vision tower's config of a multimodal config, else the config itself."""
    return getattr(config, "vision_config", None) or config


def _first_layer_is_conv_over(model, channels):
    """Whether the model's first convolution or linear layer is a Conv1d over `channels`
    (mel features read as (mels, frames))."""
    import torch

    layers = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear)
    first = next((m for m in model.modules() if isinstance(m, layers)), None)
    return isinstance(first, torch.nn.Conv1d) and first.in_channels == channels


def _mel_bins(config):
    """The mel bins a config names, or the audio encoder's config inside it (ASR models
    keep them in encoder_config, audio_config, asr_config)."""
    for c in (config, *(getattr(config, n, None) for n in ("encoder_config", "audio_config", "asr_config"))):
        if getattr(c, "num_mel_bins", None):
            return c.num_mel_bins
    return None


def _patch_sequences(config, g, side=4):
    """Images as SigLIP 2 takes them: each a sequence of flattened patches padded to the
    config's count, a mask of the real ones and each image's (height, width) in patches."""
    import torch

    config = _vision_tower(config)
    patches = torch.randn(BATCH, config.num_patches, config.num_channels * config.patch_size ** 2, generator=g)
    mask = torch.zeros(BATCH, config.num_patches, dtype=torch.long)
    mask[:, :side * side] = 1
    return {"pixel_values": patches, "pixel_attention_mask": mask, "spatial_shapes": torch.tensor([[side, side]] * BATCH)}


def _series(config, accepts, g):
    """A time-series model's inputs: a context of past values (and the lags its features
    reach back), all observed, and where it predicts from time features, the future values
    and features it is trained on."""
    import torch

    length = (getattr(config, "context_length", None) or config.prediction_length) + max(
        getattr(config, "lags_sequence", None) or [0])
    channels = getattr(config, "num_input_channels", None)
    values = torch.randn(BATCH, length, *([channels] if channels else []), generator=g)
    features = getattr(config, "num_time_features", None)
    inputs = {"past_values": values}
    for name in accepts:
        if name in ("past_observed_mask", "observed_mask"):
            inputs[name] = torch.ones_like(values)
        elif name == "past_values_padding":
            inputs[name] = torch.zeros(BATCH, length)
        elif name == "freq":  # the frequency class of each series (TimesFM)
            inputs[name] = torch.zeros(BATCH, 1, dtype=torch.long)
        elif name == "past_time_features":
            inputs[name] = torch.randn(BATCH, length, features, generator=g)
        elif name == "future_time_features":
            inputs[name] = torch.randn(BATCH, config.prediction_length, features, generator=g)
            inputs["future_values"] = torch.randn(BATCH, config.prediction_length, generator=g)
    return inputs


def _moved(inputs, device=None, dtype=None):
    """The inputs on `device`, floating ones in `dtype` (both optional); other values as they are."""
    import torch

    return {k: v.to(device=device, dtype=dtype if dtype is not None and v.is_floating_point() else None)
            if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _floating_outputs(out):
    """The floating tensors among a model's outputs (top level, in order)."""
    import torch

    values = out.to_tuple() if hasattr(out, "to_tuple") else out if isinstance(out, (tuple, list)) else (out,)
    return [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]


def _run(model, inputs, family):
    """(logits, loss, {name: grad}, generated ids or None) of one forward/backward and, for a
    family that generates, a greedy generate from the first half of the inputs' ids."""
    import torch

    out = model(**inputs)
    if family.inputs == "main":  # a base model: the mean of each floating output, summed
        outputs = _floating_outputs(out)
        if not outputs:
            raise TypeError("%s returned no floating tensor" % type(model).__name__)
        loss = sum(o.float().mean() for o in outputs)
        loss.backward()
        return outputs[0], loss, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, None
    out.loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    generated = None
    if family.generates:
        prompt = inputs["input_ids"][:, : SEQ // 2]
        with torch.no_grad():
            # one sequence a prompt, said outright: MusicGen's own generate reads it from a
            # generation config made from the model config, where it is unset
            generated = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
                                       do_sample=False, pad_token_id=0, num_return_sequences=1)
    return out.logits, out.loss, grads, generated


class _TopkRecorder:
    """While active, records the input and the chosen indices of every topk (torch.topk and
    Tensor.topk) in call order: (scores, indices, dim), copies on the call's device (read
    only when a result differs, so that recording adds no host wait). Not while Dynamo
    traces (compile mode): the recorded copies would be side effects of the traced graph."""

    def __enter__(self):
        import torch

        self.calls, self._saved = [], (torch.topk, torch.Tensor.topk)

        def recording(original):
            def topk(*args, **kwargs):
                result = original(*args, **kwargs)
                if torch.compiler.is_compiling():
                    return result
                scores = args[0] if args else kwargs["input"]
                dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
                self.calls.append((scores.detach().clone(), result.indices.detach().clone(), dim))
                return result
            return topk

        torch.topk, torch.Tensor.topk = (recording(f) for f in self._saved)
        return self

    def __exit__(self, *exc):
        import torch

        torch.topk, torch.Tensor.topk = self._saved


def _tie_order_call(cpu_calls, tpu_calls):
    """The number of the first topk call whose picks differ from CPU's only in which of
    equally scored elements they took, or in what order: scores within tolerance of CPU's,
    and at each place the two picks' CPU scores equal, or apart by no more than twice the
    rounding between tpu's and CPU's scores, which then decides their order (RT-DETR's
    query selection). Else None. Which element of a tie topk returns is unspecified (CPU,
    CUDA and tpu differ), and everything computed from it then differs."""
    import torch

    for number, ((cpu_scores, cpu_picks, dim), (tpu_scores, tpu_picks, _)) in enumerate(zip(cpu_calls, tpu_calls)):
        tpu_scores, tpu_picks = tpu_scores.cpu(), tpu_picks.cpu()
        if torch.equal(cpu_picks, tpu_picks):
            continue
        try:
            torch.testing.assert_close(tpu_scores, cpu_scores, **LOGITS_TOL)
        except AssertionError:
            return None
        # equal scores differ by 0, masked ones (-inf) too (their difference would be NaN)
        rounding = _apart(tpu_scores.double(), cpu_scores.double()).max()
        valued = [cpu_scores.double().gather(dim, picks.long()) for picks in (cpu_picks, tpu_picks)]
        return number if _apart(*valued).max() <= 2 * rounding else None
    return None


def _apart(a, b):
    """|a - b|, 0 where they are equal (infinities included)."""
    return (a - b).abs().masked_fill(a == b, 0)


def _values(result):
    """[(what, tensor, tolerance)] of one run's results, in a fixed order."""
    logits, loss, grads, _ = result
    return ([("logits", logits, LOGITS_TOL), ("loss", loss, LOGITS_TOL)] +
            [("grad of " + n, grads[n], GRAD_TOL) for n in sorted(grads)])


def _without_zero_grads_eager_leaves_unset(got, expected):
    """`got` less the all-zero gradients of parameters `expected` has none for. Under
    torch.compile, AOTAutograd gives a parameter that reaches only outputs the loss does not
    use (an encoder's pooler) a zero gradient where eager leaves it None; PyTorch's own
    compile (aot_eager, inductor) does the same on CPU."""
    grads = {n: g for n, g in got[2].items() if n in expected[2] or bool(g.count_nonzero())}
    return (got[0], got[1], grads) + tuple(got[3:])


def _compare(got, expected, reference):
    """(None or a one-line description of the first value that differs, [values that
    count as matching by the float64 rule]). A value outside the tolerance still matches
    when its largest error against the float64 run (`reference()`, the same model and
    inputs on CPU in float64) is at most FLOAT64_RULE_FACTOR times CPU's own, and
    generated tokens that differ from CPU's match when they are the float64 run's."""
    import torch

    if sorted(got[2]) != sorted(expected[2]):
        return "gradients for different parameters: %s" % sorted(set(got[2]) ^ set(expected[2]))[:5], []
    by_float64, exact = [], [None]

    def float64():
        if exact[0] is None:
            exact[0] = reference()
        return exact[0]

    for index, ((what, a, tol), (_, b, _)) in enumerate(zip(_values(got), _values(expected))):
        a = a.cpu()
        try:
            torch.testing.assert_close(a, b, **tol)
            continue
        except AssertionError as exc:
            try:
                r = _values(float64())[index][1].double()
            except Exception:  # noqa: BLE001 - no float64 run: the mismatch stands
                r = None
            if r is not None and r.shape == a.shape == b.shape and \
                    (a.double() - r).abs().max() <= FLOAT64_RULE_FACTOR * (b.double() - r).abs().max():
                by_float64.append(what)
                continue
            detail = [ln.strip() for ln in str(exc).splitlines() if ln.strip().startswith("Greatest")]
            return _first_line("%s: %s" % (what, "; ".join(detail) or str(exc))), by_float64
    if got[3] is None:
        return None, by_float64
    generated, e_generated = got[3].cpu(), expected[3]
    if not torch.equal(generated, e_generated):
        try:
            same_as_float64 = torch.equal(generated, float64()[3])
        except Exception:  # noqa: BLE001
            same_as_float64 = False
        if not same_as_float64:
            return "generate: tokens %s, CPU %s" % (generated.tolist(), e_generated.tolist()), by_float64
        by_float64.append("generate")
    return None, by_float64


def _head_config(family, config):
    """A composite config's sub-config and the head class that takes it, where the family's
    head is built from a part (MusicGen's causal LM is its decoder); else (config, None)."""
    import transformers
    from transformers.models.auto import modeling_auto
    name = getattr(modeling_auto, family.mapping).get(config.model_type)
    if isinstance(name, tuple) and config.architectures is None:  # the auto class picks one of several by it
        config.architectures = [name[0]]
    head = getattr(transformers, name, None) if isinstance(name, str) else None
    wanted = getattr(head, "config_class", None)
    if wanted is None or isinstance(config, wanted):
        return config, None
    for part in getattr(config, "sub_configs", {}):
        value = getattr(config, part, None)
        if isinstance(value, wanted):
            for knob, setting in HEAD_CONFIGS.get(config.model_type, {}).items():
                setattr(value, knob, setting)
            return value, head
    return config, None


def run_model(model_type, mode, progress=lambda record: None):
    """One model type in this process: a record {model, family, status, ...}. `progress(record)`
    gets what the record would say if the process ended at that point."""
    import torch
    import torch_tpu
    import transformers

    family = family_of(model_type)
    auto_class = getattr(transformers, family.auto_class)
    record = {"model": model_type, "family": family.name, "mode": mode}
    progress(dict(record, status="config", error="the process ended while the model was built or run on CPU"))
    try:
        config = tiny_config(model_type)
        config, head = _head_config(family, config)
        # the auto class would give such a head the composite config
        build = auto_class.from_config if head is None else head._from_config
        with torch.device("meta"):  # a config the shrinking missed (nested ones) can be huge
            size = sum(p.numel() for p in build(config).parameters())
        if size > MAX_PARAMETERS:
            record.update(status="config", error="%d parameters after shrinking the config" % size)
            return record
        torch.manual_seed(0)
        cpu_model = build(config).eval()
        jitter(cpu_model)
        tpu_model = copy.deepcopy(cpu_model)
        inputs = make_inputs(family, config, cpu_model)
        with _TopkRecorder() as cpu_topk:
            expected = _run(cpu_model, inputs, family)
    except Exception as exc:  # noqa: BLE001 - not the backend's doing; recorded
        record.update(status="config", error=_error_line(exc))
        return record
    record["parameters"] = sum(p.numel() for p in cpu_model.parameters())
    if mode == "cpu":  # the CPU half alone: which types build, and why the others do not
        record["status"] = "builds"
        return record
    progress(dict(record, status="errors", error="the process ended during the tpu run"))
    # compile: the model's forward through torch.compile(backend="tpu") (backward compiled
    # with it by AOTAutograd; generate's decode steps too), the rest eager in strict mode.
    torch_tpu.set_eager_mode("strict" if mode == "compile" else mode)

    tpu_topk_calls = []

    def attempt():
        model = copy.deepcopy(tpu_model).to("tpu")
        if mode == "compile":
            from torch_tpu import _compile
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            graphs_before = _compile.stats()["compiled_graphs"]
            copies_before = _compile.stats()["layout_copies"]
            model.forward = torch.compile(model.forward, backend="tpu")
        with _TopkRecorder() as tpu_topk:
            got = _run(model, _moved(inputs, "tpu"), family)
        tpu_topk_calls[:] = tpu_topk.calls
        torch.tpu.synchronize()
        if mode == "compile":  # graph breaks are allowed, and counted
            record["graph_breaks"] = sum(torch._dynamo.utils.counters["graph_break"].values())
            record["compiled_graphs"] = _compile.stats()["compiled_graphs"] - graphs_before
            # results a lowering laid out otherwise than the fake tensors (lowerings to fix)
            copies = {op: n - copies_before.get(op, 0) for op, n in _compile.stats()["layout_copies"].items()}
            record["layout_copies"] = {op: n for op, n in copies.items() if n}
        return got

    start = time.perf_counter()
    try:
        with fallback_mode("error"):
            got = attempt()
        status = "native"
    except Exception as exc:  # noqa: BLE001 - classified below
        if not _is_fallback_error(exc):
            record.update(status="errors", error=_first_line("%s: %s" % (type(exc).__name__, exc)))
            return record
        torch_tpu.reset_metrics()
        try:
            with fallback_mode("allow"):
                got = attempt()
        except Exception as exc2:  # noqa: BLE001
            record.update(status="errors", error=_first_line("%s: %s" % (type(exc2).__name__, exc2)))
            return record
        status = "fallback"
        record["fallback_ops"] = torch_tpu.metrics()["fallback_ops"]
    record["tpu_seconds"] = time.perf_counter() - start
    mismatch, record["matched_by_float64"] = _compare(
        _without_zero_grads_eager_leaves_unset(got, expected) if mode == "compile" else got, expected,
        lambda: _run(copy.deepcopy(tpu_model).double(), _moved(inputs, dtype=torch.float64), family))
    if mismatch and mode == "compile" and _matches_cpu_compiled(got, tpu_model, inputs, family):
        # The model computes otherwise compiled than eager (a branch on
        # torch.compiler.is_compiling(), as PaliGemma's attention mask): CPU compiled is the reference.
        mismatch, record["reference"] = None, "CPU compiled (aot_eager): CPU eager computes otherwise"
    if mismatch:
        tie = _tie_order_call(cpu_topk.calls, tpu_topk_calls)
        if tie is not None:
            mismatch = ("topk tie order: topk call %d took other elements of equal score than CPU's "
                        "(or of scores as close as their rounding); then %s" % (tie, mismatch))
        record.update(status="fails", error=mismatch)
    else:
        record["status"] = status
    return record


def _error_line(exc):
    """`Type: message` on one line; where the message's first line only introduces the next (a
    config validator's "Class validation error for validator 'x':"), the next line too."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    return _first_line("%s: %s" % (type(exc).__name__, text))


def _matches_cpu_compiled(got, cpu_model, inputs, family):
    """Whether `got` (a compile-mode run, its gradients as they came) matches the same
    model's forward compiled on CPU by torch.compile(backend="aot_eager"): PyTorch's own
    compiled semantics, no backend."""
    import torch

    model = copy.deepcopy(cpu_model)
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, backend="aot_eager")
    try:
        expected = _run(model, inputs, family)
    except Exception:  # noqa: BLE001 - no compiled CPU run: the eager comparison stands
        return False
    finally:
        torch._dynamo.reset()
    return _compare(_without_zero_grads_eager_leaves_unset(got, expected), expected, lambda: None)[0] is None


def _run_in_subprocess(model_type, mode, timeout):
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "torch_tpu.tools.hf_report", "--child", model_type, "--mode", mode,
           "--child-out", out]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        ended = "exit status %s" % proc.returncode
    except subprocess.TimeoutExpired:
        proc, ended = None, "timeout after %g s" % timeout
    try:
        with open(out) as f:
            text = f.read()
    finally:
        os.unlink(out)
    if not text:  # not even the first progress record: the interpreter itself failed
        tail = (proc.stderr if proc else "").strip().splitlines()[-1:] or [""]
        return {"model": model_type, "mode": mode, "status": "errors", "error": _first_line(
            "%s (%s)" % (tail[0], ended))}
    record = json.loads(text)
    if proc is None or proc.returncode != 0:  # the last progress record says where it ended
        record["error"] = _first_line("%s (%s)" % (record.get("error", ""), ended))
    return record


def summarize(records):
    """Per status the count of the records that ran on tpu, and their total; the records of
    --mode cpu count as "builds"."""
    if any(r["status"] == "builds" for r in records):
        built = sum(r["status"] == "builds" for r in records)
        return dict({s: 0 for s in STATUSES}, builds=built), built
    counted = [r for r in records if r["status"] in STATUSES]
    counts = {s: sum(r["status"] == s for r in counted) for s in STATUSES}
    return counts, len(counted)


def fallback_histogram(records):
    """The ops that fall back, most needed first: for each, the models that need it
    (status fallback) and its calls over all of them."""
    ops = {}
    for r in records:
        for op, calls in (r.get("fallback_ops") or {}).items():
            entry = ops.setdefault(op, {"op": op, "models": 0, "calls": 0})
            entry["models"] += 1
            entry["calls"] += int(calls)
    return sorted(ops.values(), key=lambda e: (-e["models"], -e["calls"], e["op"]))


def markdown(records, mode, transformers_version):
    counts, total = summarize(records)
    shown = ("builds",) if mode == "cpu" else STATUSES
    lines = ["# Hugging Face models on tpu (%s mode, transformers %s)" % (mode, transformers_version), "",
             "Tiny random models (torch_tpu/tools/hf_report.py): forward with labels, backward and, for the LM "
             "families, a greedy generate of %d tokens, compared with CPU." % NEW_TOKENS, "",
             ", ".join("%s %d" % (s, counts[s]) for s in shown) + " of %d models built on CPU; "
             "config (not built or not run on CPU, not counted) %d." % (total, len(records) - total), "",
             "| family | %s | config |" % " | ".join(shown), "|---|" + "---|" * (len(shown) + 1)]
    for name in [f.name for f in FAMILIES]:
        of = [r for r in records if r.get("family", "causal-lm") == name]
        if of:
            lines.append("| %s | %s | %d |" % (name, " | ".join(str(sum(r["status"] == s for r in of)) for s in shown),
                                              sum(r["status"] not in shown for r in of)))
    lines += ["", "| model | family | status | detail |", "|---|---|---|---|"]
    for r in records:
        detail = r.get("error") or (", ".join(sorted(r.get("fallback_ops", {}))) if r.get("fallback_ops") else "") \
            or ("against " + r["reference"] if r.get("reference") else "")
        lines.append("| %s | %s | %s | %s |" % (r["model"], r.get("family", "causal-lm"), r["status"],
                                                detail.replace("|", "\\|")))
    histogram = fallback_histogram(records)
    if histogram:
        lines += ["", "## Ops that fall back", "", "| op | models | calls |", "|---|---|---|"]
        lines += ["| %s | %d | %d |" % (e["op"], e["models"], e["calls"]) for e in histogram]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=None, help="comma-separated model types (default: every type of --families)")
    parser.add_argument("--families", default=None,
                        help="comma-separated families (default all): " + ", ".join(f.name for f in FAMILIES))
    parser.add_argument("--mode", default="strict", choices=("strict", "fused", "compile", "debug", "cpu"),
                        help="cpu: build and run each type on CPU alone (which build, and CPU's message where not)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model type")
    parser.add_argument("--out-dir", default="reports")
    parser.add_argument("--jobs", type=int, default=1, help="model types run at a time (one process each)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the records of this mode already in <out-dir>/hf_models.json; run the rest")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        def write(record):
            with open(args.child_out + ".tmp", "w") as f:
                json.dump(record, f)
            os.replace(args.child_out + ".tmp", args.child_out)
        write(run_model(args.child, args.mode, progress=write))
        return 0
    import transformers

    models = args.models.split(",") if args.models else model_types(args.families.split(",") if args.families else None)
    path = os.path.join(args.out_dir, "hf_models.json")
    kept = {}
    if args.resume and os.path.exists(path):
        with open(path) as f:
            previous = json.load(f)
        if previous.get("mode") == args.mode:
            kept = {r["model"]: r for r in previous["models"]}
    records = dict(kept)
    order = models + [m for m in kept if m not in models]
    os.makedirs(args.out_dir, exist_ok=True)
    started = time.perf_counter()

    def save():
        ordered = [records[m] for m in order if m in records]
        report = {"mode": args.mode, "transformers": transformers.__version__, "models": ordered,
                  "fallback_histogram": fallback_histogram(ordered), "seconds": time.perf_counter() - started}
        for name, text in (("hf_models.json", json.dumps(report, indent=1)),
                           ("hf_models.md", markdown(ordered, args.mode, transformers.__version__))):
            with open(os.path.join(args.out_dir, name + ".tmp"), "w") as f:
                f.write(text)
            os.replace(os.path.join(args.out_dir, name + ".tmp"), os.path.join(args.out_dir, name))
        return ordered

    todo = [m for m in models if m not in kept]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        running = {pool.submit(_run_in_subprocess, m, args.mode, args.timeout): m for m in todo}
        for i, done in enumerate(concurrent.futures.as_completed(running)):
            model_type, record = running[done], done.result()
            records[model_type] = record
            save()
            print("[%5.0fs] %3d/%d %-28s %s %s" % (time.perf_counter() - started, i + 1, len(todo), model_type,
                                                  record["status"], record.get("error", "")[:120]), flush=True)
    counts, total = summarize(save())
    if args.mode == "cpu":
        print("build: %d/%d model types" % (total, len(records)))
        return 0
    print("native: %d/%d models (%.1f%%)" % (counts["native"], total, 100.0 * counts["native"] / max(total, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
