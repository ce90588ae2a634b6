"""DTensor's sharding rules for the ops tpu has and DTensor does not know.

F.scaled_dot_product_attention on tpu runs ATen's "overrideable" fused op
(csrc/aten/attention.cpp), for which torch ships no sharding rule (it has
them for CUDA's flash, efficient and cudnn ops). Without one, DTensor raises
on it: under torch.compile, and in eager code once subclasses take the fused
kernels. The rules here are the attention's own: replicated; sharded on the
heads (tensor parallelism: each rank attends its query heads to its key
heads, the grouping of query heads over key heads is the same on every rank
when both head counts divide by the mesh size); sharded on the batch. A mask
is sharded where it has the heads (batch) dimension, else replicated; the
gradient of a replicated mask is a partial sum over the ranks.

register() runs when tpu_dist makes a process group (DTensor needs one) or
when torch_tpu is imported after torch.distributed.tensor; importing DTensor
costs ~0.8 s, so nothing imports it earlier.
"""
import functools
import sys

import torch


def _splits(bias):
    """[(how query, key, value and the scores are split, how the mask is)]: on the heads, on the
    batch, replicated. A mask broadcasting to [B, H, L, S] is split where it has that dimension."""
    from torch.distributed.tensor import Replicate, Shard

    if bias is None:
        return [(Shard(1), None), (Shard(0), None), (Replicate(), None)]
    shape, rank = bias.shape, len(bias.shape)
    heads = Shard(rank - 3) if rank >= 3 and shape[rank - 3] != 1 else Replicate()
    batch = Shard(0) if rank == 4 and shape[0] != 1 else Replicate()
    return [(Shard(1), heads), (Shard(0), batch), (Replicate(), Replicate())]


def _forward_rules(query, key, value, attn_bias=None, *args, **kwargs):
    from torch.distributed.tensor import Replicate

    # outputs: out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_attn_mask
    return [([along, along, None, None, None, None, Replicate(), Replicate(), None], [along, along, along, bias])
            for along, bias in _splits(attn_bias)]


def _backward_rules(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                    cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset,
                    *args, **kwargs):
    from torch.distributed.tensor import Partial, Replicate

    def rule(along, bias):
        # A mask's gradient is split as the mask is; a replicated mask's, while its scores are
        # split, is each rank's sum over its part.
        grad_bias = None if bias is None else bias if bias.is_shard() or not along.is_shard() else Partial()
        outputs = [along, along, along, grad_bias]
        inputs = [along, along, along, along, bias, None, along, along,
                  None if cum_seq_q is None else Replicate(), None if cum_seq_k is None else Replicate(),
                  None, None, None, None,
                  None if philox_seed is None else Replicate(), None if philox_offset is None else Replicate()]
        return outputs, inputs

    return [rule(along, bias) for along, bias in _splits(attn_bias)]


@functools.cache
def register():
    """Registers the rules with DTensor and lets eager subclasses take the fused attention (once)."""
    from torch.distributed.tensor.experimental import register_sharding

    aten = torch.ops.aten
    register_sharding(aten._scaled_dot_product_fused_attention_overrideable.default)(_forward_rules)
    register_sharding(aten._scaled_dot_product_fused_attention_overrideable_backward.default)(_backward_rules)
    from . import _C

    _C._set_subclasses_take_fused_attention(True)


def register_if_dtensor_loaded():
    if "torch.distributed.tensor" in sys.modules:
        register()
