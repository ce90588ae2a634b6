"""nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell run natively on tpu (PyTorch
calls the fused cells aten::_thnn_fused_lstm_cell / _thnn_fused_gru_cell on an
accelerator; CPU has no kernel for them to fall back to): forward and backward
against CPU, multi-layer, bidirectional, projections, packed sequences, given
initial states, in strict and fused mode."""
import copy

import pytest
import torch

import torch_tpu

MODULES = {
    "lstm_cell": (lambda: torch.nn.LSTMCell(4, 6), (3, 4)),
    "lstm_cell_no_bias_unbatched": (lambda: torch.nn.LSTMCell(4, 6, bias=False), (4,)),
    "gru_cell": (lambda: torch.nn.GRUCell(4, 6), (3, 4)),
    "gru_cell_no_bias": (lambda: torch.nn.GRUCell(4, 6, bias=False), (3, 4)),
    "lstm_2_layers_bidirectional_proj": (lambda: torch.nn.LSTM(4, 6, 2, bidirectional=True, proj_size=3), (5, 3, 4)),
    "gru_2_layers_bidirectional_batch_first": (lambda: torch.nn.GRU(4, 6, 2, bidirectional=True, batch_first=True),
                                               (3, 5, 4)),
    "lstm_unbatched": (lambda: torch.nn.LSTM(4, 6), (5, 4)),
}


def _run(module, x, *extra):
    out = module(x, *extra)
    return out[0] if isinstance(out, tuple) else out


def _compare(cpu_module, inputs, extra=(), tol=dict(rtol=1e-4, atol=1e-5)):
    tpu_module = copy.deepcopy(cpu_module).to("tpu")
    cpu_inputs = [t.clone().requires_grad_(True) for t in inputs]
    tpu_inputs = [t.to("tpu").requires_grad_(True) for t in inputs]
    out_cpu, out_tpu = _run(cpu_module, *cpu_inputs, *extra), _run(tpu_module, *tpu_inputs, *extra)
    torch.testing.assert_close(out_tpu.cpu(), out_cpu, **tol)
    (out_cpu * out_cpu).sum().backward()
    (out_tpu * out_tpu).sum().backward()
    for a, b in zip(tpu_inputs, cpu_inputs):
        torch.testing.assert_close(a.grad.cpu(), b.grad, **tol)
    for (name, p), q in zip(cpu_module.named_parameters(), tpu_module.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, **tol, msg=name)


@pytest.fixture(params=["strict", "fused"])
def mode(request):
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode(request.param):
        yield request.param
    assert torch_tpu.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("name", MODULES)
def test_recurrent_module_matches_cpu(mode, name):
    make, shape = MODULES[name]
    torch.manual_seed(0)
    _compare(make(), [torch.randn(*shape)])


def test_lstm_with_initial_states(mode):
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 6, 2)
    x, h0, c0 = torch.randn(5, 3, 4), torch.randn(2, 3, 6), torch.randn(2, 3, 6)
    tpu_lstm = copy.deepcopy(lstm).to("tpu")
    states = [t.clone().requires_grad_(True) for t in (h0, c0)]
    tpu_states = [t.to("tpu").requires_grad_(True) for t in (h0, c0)]
    out, (h, c) = lstm(x, tuple(states))
    tpu_out, (tpu_h, tpu_c) = tpu_lstm(x.to("tpu"), tuple(tpu_states))
    for a, b in ((tpu_out, out), (tpu_h, h), (tpu_c, c)):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-5)
    (out.sum() + h.sum() * 2 + c.sum() * 3).backward()
    (tpu_out.sum() + tpu_h.sum() * 2 + tpu_c.sum() * 3).backward()
    for a, b in zip(tpu_states, states):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_packed_sequences(mode, kind):
    torch.manual_seed(0)
    module = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(4, 6, 2, bidirectional=True)
    tpu_module = copy.deepcopy(module).to("tpu")
    lengths = [5, 3, 2]
    x = torch.randn(5, 3, 4)
    outputs = []
    for m, device in ((module, "cpu"), (tpu_module, "tpu")):
        data = x.detach().clone().to(device).requires_grad_(True)
        packed = torch.nn.utils.rnn.pack_padded_sequence(data, lengths)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(m(packed)[0])
        (out * out).sum().backward()
        outputs.append((out, data.grad))
    (out_cpu, grad_cpu), (out_tpu, grad_tpu) = outputs
    torch.testing.assert_close(out_tpu.cpu(), out_cpu, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad_tpu.cpu(), grad_cpu, rtol=1e-4, atol=1e-5)


def test_bfloat16_autocast_lstm_runs_natively():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 6)
    tpu_lstm = copy.deepcopy(lstm).to("tpu")
    x = torch.randn(5, 3, 4)
    torch_tpu.reset_metrics()
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = tpu_lstm(x.to("tpu"))[0]
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected = lstm(x)[0]
    except RuntimeError as e:
        # oneDNN's bf16 LSTM primitive needs AVX-512 (an AMD EPYC without it raises this);
        # then the values come from CPU's native kernel, the dtype from oneDNN's (bfloat16).
        if "primitive descriptor" not in str(e):
            raise
        with torch.backends.mkldnn.flags(enabled=False), torch.autocast("cpu", dtype=torch.bfloat16):
            expected = lstm(x)[0].to(torch.bfloat16)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out.float().cpu(), expected.float(), rtol=2e-2, atol=2e-2)
    out.float().sum().backward()
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_cell_shape_errors_are_python_errors():
    gates, state = torch.zeros(3, 8, device="tpu"), torch.zeros(3, 2, device="tpu")
    with pytest.raises(RuntimeError, match="same shape"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, torch.zeros(3, 4, device="tpu"), state)
    with pytest.raises(RuntimeError, match="the state must have shape"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.zeros(3, 3, device="tpu"))
    with pytest.raises(RuntimeError, match="3 times the hidden size"):
        torch.ops.aten._thnn_fused_gru_cell(gates, gates, state)
    with pytest.raises(RuntimeError, match="a bias must have shape"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, state, torch.zeros(4, device="tpu"), torch.zeros(4, device="tpu"))
