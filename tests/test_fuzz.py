"""The differential fuzzer (torch_tpu.tools.fuzz): a CI slice of random programs in every
mode agrees with CPU, and the fuzzer itself notices a planted difference."""
import torch

from torch_tpu.tools import fuzz


def test_a_slice_of_random_programs_agrees_with_cpu_in_every_mode():
    modes = ["strict", "fused", "debug", "compiled"]
    # A slice for CI (about 100 s; the run of record is 10,000 programs a mode).
    records = fuzz.run(programs=150, modes=modes, seed=0, batch=75)
    assert not [r for r in records if "crash" in r]
    failures = [(r["program"], r["mode"], r["failure"]) for r in records if r.get("failure")]
    assert not failures, failures
    table = fuzz.summary(records, modes)
    assert all(table[m]["programs"] == 150 for m in modes)


def test_the_fuzzer_finds_and_shrinks_a_planted_difference(monkeypatch):
    original = fuzz.apply_step

    def wrong_on_tpu(torch_module, pool, step):
        original(torch_module, pool, step)
        if step["kind"] == "unary" and pool[-1].device.type == "tpu" and pool[-1].is_floating_point():
            pool[-1] = pool[-1] + 1  # a planted bug: tpu's unary ops are off by one

    monkeypatch.setattr(fuzz, "apply_step", wrong_on_tpu)
    program = {"inputs": [{"shape": [3], "dtype": "float32", "seed": 1}],
               "steps": [{"kind": "view", "a": 0, "b": 0, "op": "flatten", "i": 0, "j": 0, "step": 1},
                         {"kind": "unary", "a": 0, "b": 0, "op": "neg"},
                         {"kind": "scalar", "a": 1, "b": 0, "op": "mul", "scalar": 2, "reverse": False}]}
    small, failure = fuzz.shrink(torch, program, "strict")
    assert failure.startswith("tensor 2: values")
    assert [s["kind"] for s in small["steps"]] == ["unary"]


def test_documented_differences_are_counted_apart():
    assert fuzz.documented("strict", "RuntimeError: ZeroDivisionError", None)
    assert fuzz.documented("debug", "RuntimeError: ZeroDivisionError", None) is None
    cpu = torch.tensor([torch.iinfo(torch.int32).min, 3], dtype=torch.int32)
    assert fuzz._undefined_conversion(torch, cpu, torch.tensor([0, 3], dtype=torch.int32))
    assert not fuzz._undefined_conversion(torch, cpu, torch.tensor([0, 4], dtype=torch.int32))


def test_a_compiled_difference_that_pytorch_makes_on_cpu_too_is_counted_apart():
    # A write through an expanded view: AOTAutograd's functionalization sums it back into
    # the base, on CPU (aot_eager, inductor) as on tpu, where eager CPU writes each element once.
    program = {"inputs": [{"shape": [3], "dtype": "float32", "seed": 1}],
               "steps": [{"kind": "view", "a": 0, "b": 0, "op": "expand", "i": 0, "j": 0, "step": 1},
                         {"kind": "in_place", "a": 1, "b": 0, "op": "fill_", "scalar": 2}]}
    assert fuzz.compare(torch, program, "compiled") == "documented: " + fuzz.COMPILED_AS_ON_CPU
    assert fuzz.compare(torch, program, "strict") is None  # eager tpu writes as eager CPU does
