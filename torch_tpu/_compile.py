"""torch.compile(backend="tpu") (also backend="openxla" when torch_xla is absent).

Dynamo hands each FX graph to AOTAutograd (core-ATen decompositions), which
gives a forward and a backward graph of ATen ops. Each runs once through the
same lowerings as eager, captured in the fused pending graph, and is sealed
into one XLA program; later calls with inputs of the same shapes, dtypes and
layouts bind the input buffers and launch that program directly, with no
per-op dispatch. A graph that reads data, falls back to the CPU or draws
random numbers while being captured cannot be sealed: it runs op by op in
fused mode on every call instead (counted in metrics as compile_eager_graphs).

Ops that work on CPU tensors alone (an optimizer's step counts and the bias
corrections made from them) run on the host before the program, as inductor
runs them in C++: the program gets their 0-d results as inputs and the step
counts never have to come back from the device, which would make every step
wait for its device work to finish.
"""
import contextlib
import importlib.abc
import importlib.metadata
import importlib.util
import operator
import sys

import torch

from . import _C

from . import _bucket_policy


class _LazyBuckets:
    """_buckets (the padding analysis) imported at first use: it needs sympy, which
    costs about half a second of `import torch` that eager-only programs never use."""

    def __getattr__(self, name):
        from . import _buckets as module
        globals()["_buckets"] = module
        return getattr(module, name)


_buckets = _LazyBuckets()

_stats = {"compiled_graphs": 0, "captures": 0, "replays": 0, "compile_eager_graphs": 0,
          "default_backend_graphs": 0,  # torch.compile's default backend, given a graph on tpu
          # dynamic shapes (see _buckets.py): calls run padded to a bucket, calls that had
          # symbolic sizes but ran with exact shapes, and why (graphs counted once per reason)
          "padded_calls": 0, "exact_dynamic_calls": 0, "unpadded_graphs": {},
          # results a lowering laid out otherwise than the fake tensors said, copied into
          # the traced layout while capturing (by op: each is a lowering to fix)
          "layout_copies": {}}


def stats():
    out = dict(_stats)
    out["unpadded_graphs"] = dict(_stats["unpadded_graphs"])
    out["layout_copies"] = dict(_stats["layout_copies"])
    return out


def _count_unpadded(reason):
    _stats["unpadded_graphs"][reason] = _stats["unpadded_graphs"].get(reason, 0) + 1


def _is_tpu(t):
    return isinstance(t, torch.Tensor) and t.device.type == "tpu"


def _copy_to_cpu(pairs):
    """cpu.copy_(tpu) for each (cpu, tpu) pair, with one download per dtype:
    each download waits for the device, and an optimizer has a step counter
    per parameter."""
    by_dtype = {}
    for cpu, value in pairs:
        by_dtype.setdefault(value.dtype, []).append((cpu, value))
    for group in by_dtype.values():
        if len(group) == 1:
            group[0][0].copy_(group[0][1])
            continue
        flat = torch.cat([value.reshape(-1) for _, value in group]).cpu()
        for (cpu, value), part in zip(group, flat.split([v.numel() for _, v in group])):
            cpu.copy_(part.view(value.shape))


def _signature(args):
    """What a sealed program depends on besides buffer contents: each tpu
    tensor's dtype, device and layout (shape, strides, offset, storage size),
    the dtype of each 0-d CPU tensor (uploaded per call), the value of each
    Python number; None when an argument cannot be sealed (a CPU tensor of
    higher rank, another object). A tuple, so keys can be prepended."""
    return _C._compile_signature(args)


def _rng_state(device):
    return torch.tpu.get_rng_state(device)


class CompiledGraph:
    """One AOTAutograd graph (forward, backward or inference) on tpu."""

    def __init__(self, gm, forward=None):
        self.host, self.gm = HostPrelude.split(gm)
        self.programs = {}   # signature -> (sealed program, output layout)
        self.op_by_op = set()  # signatures that could not be sealed
        self.forward = forward    # a backward graph's forward graph: it hands over padded tensors
        self.backward = None
        self._analysis = None
        self._plan = None
        self.padded_calls = {}  # real sizes -> _PaddedCall, or _EXACT, under padded_calls_policy
        self.padded_calls_policy = None
        self.relaid = False  # a capture copied a result into its traced layout
        if forward is not None:
            forward.backward = self

    # -- dynamic shapes
    def analysis(self):
        """The padding analysis of this graph alone (layouts, supported or why not)."""
        if self._analysis is None:
            layouts, saved = {}, set()
            fw = self.forward.analysis() if self.forward is not None else None
            if fw is not None and fw.supported:
                layouts, saved = _handover_layouts(fw, self.gm)
            plan = _buckets.Plan(self.gm, layouts)
            plan.saved_inputs = saved
            plan.forward_padded = fw is not None and fw.supported
            self._analysis = plan
        return self._analysis

    def plan(self):
        """The analysis, also unsupported when the paired backward graph cannot be padded."""
        if self._plan is None:
            plan = self.analysis()
            if plan.supported and self.backward is not None and not self.backward.analysis().supported:
                plan.reason = "backward: " + self.backward.analysis().reason
            if not plan.supported and plan.reason != "static":
                _count_unpadded(plan.reason)
            self._plan = plan
        return self._plan

    def __call__(self, *args):
        if self.host is not None:
            args = self.host.run(args)
        if _bucket_policy.policy().enabled:
            plan = self.plan()
            if plan.supported:
                result = self._call_padded(plan, args)
                if result is not _EXACT:
                    return result
            if plan.reason != "static":
                _stats["exact_dynamic_calls"] += 1
        if self.forward is not None and self.analysis().forward_padded:
            args = self._unpad_handover(args)
        return self._run(args, self.gm, ())

    def _placeholders(self):
        return [n for n in self.gm.graph.nodes if n.op == "placeholder"]

    def _call_padded(self, plan, args):
        real = _buckets.bind_symbols(self.gm, args, plan)
        if real is None:
            return _EXACT
        if self.padded_calls_policy is not _bucket_policy.policy():  # set_dynamic_buckets: buckets change
            self.padded_calls, self.padded_calls_policy = {}, _bucket_policy.policy()
        sizes = tuple(real.items())
        call = self.padded_calls.get(sizes)
        if call is None:
            if len(self.padded_calls) >= _PADDED_CALLS_KEPT:
                self.padded_calls.clear()
            call = self.padded_calls[sizes] = _PaddedCall.prepare(self, plan, real)
        if call is _EXACT:
            return _EXACT
        new_args, write_back = [], []
        for a, (kind, what) in zip(args, call.inputs):
            if kind == "size":
                new_args.append(what)
            elif kind == "tensor" and isinstance(a, torch.Tensor):
                layout, padded_shape, real_shape, mutated = what
                shape = tuple(a.shape)
                if shape == padded_shape:
                    new_args.append(a)
                elif shape == real_shape and a.device.type == "tpu":
                    p = _buckets.pad(a, layout, call.real, call.padded)
                    if mutated and p.untyped_storage().data_ptr() != a.untyped_storage().data_ptr():
                        write_back.append((a, p, layout))
                    new_args.append(p)
                else:
                    return _EXACT
            else:
                new_args.append(a)
        outputs = self._run(new_args + call.extra, call.run_padded, call.key)
        _stats["padded_calls"] += 1
        self.last_padding = (call.real, call.padded)  # for a backward graph that has to run exact
        for a, p, layout in write_back:
            a.copy_(_buckets.unpad(p, layout, call.real, call.padded))
        return self._slice_outputs(call, outputs)

    def _slice_outputs(self, call, outputs):
        single = not isinstance(outputs, (list, tuple))
        flat = [outputs] if single else list(outputs)
        result = []
        for value, (kind, what) in zip(flat, call.outputs):
            if kind == "size":
                value = what
            elif kind == "tensor" and isinstance(value, torch.Tensor):
                value = _buckets.unpad(value, what, call.real, call.padded)
            result.append(value)
        if single:
            return result[0]
        return type(outputs)(result)

    def _unpad_handover(self, args):
        """Exact shapes for a backward graph whose forward graph ran padded."""
        plan = self.analysis()
        real = _buckets.bind_symbols(self.gm, args, plan)
        if real is None:
            return args
        last = getattr(self.forward, "last_padding", None)
        padded = last[1] if last is not None and last[0] == real else \
            {s: _bucket_policy.policy().bucket(v) for s, v in real.items()}
        args = list(args)
        for k, node in enumerate(self._placeholders()):
            a = args[k]
            if node.name in plan.saved_inputs and isinstance(a, torch.Tensor):
                layout = plan.layouts.get(node)
                if layout is not None and tuple(a.shape) != _buckets.layout_shape(layout, real):
                    args[k] = _buckets.unpad(a, layout, real, padded)
        return args

    # -- sealing and replaying
    def _run_fused(self, fn, args):
        from . import modes
        with modes.eager_mode("fused"):
            return self._as_traced(fn)(*args)

    def _as_traced(self, fn, capturing=False):
        """The graph's own code run so that every result is laid out as its fake tensor:
        later views in the graph, AOTAutograd's regenerated output aliases and the caller
        were all traced against those strides. Captures check (once per signature); op-by-op
        calls pay for the interpreter only where a capture found a result to copy."""
        if fn is not self.gm or not (capturing or self.relaid):
            return fn
        return lambda *args: _TracedLayouts(self).run(*args)

    def _run(self, args, fn, key):
        signature = _signature(args)
        if signature is not None:
            signature = key + signature
            sealed = self.programs.get(signature)
            if sealed is not None:  # the steady state: one C++ call, uploads and write-backs included
                program, layout = sealed
                _stats["replays"] += 1
                return self._assemble(layout, program.call(args))
        device = next((a.device.index for a in args if _is_tpu(a)), None)
        if device is None:
            signature = None
        uploads = {}
        if signature is not None:
            # 0-d CPU tensors (the bias corrections the host part made from an optimizer's
            # step counts) change every call: program inputs, not constants. They travel
            # as tpu copies; mutations come back.
            args = list(args)
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor) and a.device.type == "cpu":
                    uploads[i] = a
                    # Equal scalars (every parameter's bias correction) share one upload;
                    # complex32 has no scalar buffer form and goes the general way.
                    args[i] = a.to(torch.device("tpu", device)) if a.dtype == torch.complex32 else \
                        _C._scalar_to_device(a, device)
        if signature is None or signature in self.op_by_op:
            return self._run_fused(fn, args)
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        outputs = self._capture(fn, device, signature, args, inputs)
        sealed = self.programs.get(signature)
        if uploads:
            self._write_back(uploads, args, inputs, sealed)
        return outputs

    @staticmethod
    def _write_back(uploads, args, inputs, sealed):
        """Copies mutated uploads back into their CPU tensors."""
        if sealed is not None:
            position = {id(t): k for k, t in enumerate(inputs)}
            written = {position[id(args[i])] for i in uploads} & set(sealed[0].mutated_inputs)
            _copy_to_cpu([(cpu, args[i]) for i, cpu in uploads.items() if position[id(args[i])] in written])
            return
        for i, cpu in uploads.items():  # run op by op: compare
            value = args[i].cpu()
            if not torch.equal(value, cpu):
                cpu.copy_(value)

    def _capture(self, fn, device, signature, args, inputs):
        from . import modes
        _stats["captures"] += 1
        rng_before = _rng_state(device)
        previous = modes.get_eager_mode()
        token = _C._begin_capture(device)
        _C._set_eager_mode("fused")  # nothing pending: no cut
        try:
            outputs = self._as_traced(fn, capturing=True)(*args)
        except BaseException:
            _C._abandon_capture(device)
            _C._set_eager_mode(previous)
            raise
        flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        program = None
        # Integer outputs (sizes a forward graph saves for its backward) follow from the
        # signature, which holds every integer input: the program returns them as constants.
        if all(_is_tpu(o) or o is None or type(o) is int for o in flat) and \
                torch.equal(rng_before, _rng_state(device)):
            try:
                program = _C._end_capture(device, token, inputs, [o for o in flat if _is_tpu(o)])
            except RuntimeError:
                _C._set_eager_mode(previous)
                raise
        # Restoring the mode runs what an unsealed capture left pending.
        _C._set_eager_mode(previous)
        if program is None:
            self.op_by_op.add(signature)
            _stats["compile_eager_graphs"] += 1
        else:
            self.programs[signature] = (program, (type(outputs), [o if not _is_tpu(o) else _TENSOR for o in flat]))
            _stats["compiled_graphs"] += 1
        return outputs

    @staticmethod
    def _assemble(layout, results):
        kind, slots = layout
        it = iter(results)
        flat = [next(it) if slot is _TENSOR else slot for slot in slots]
        if issubclass(kind, (list, tuple)):
            return kind(flat)
        return flat[0]


class _TracedLayouts(torch.fx.Interpreter):
    """Runs a graph copying each result that a lowering laid out otherwise than the
    graph's fake tensor into the fake tensor's layout, counted by op."""

    def __init__(self, compiled):
        super().__init__(compiled.gm)
        self.compiled = compiled

    def run_node(self, n):
        result = super().run_node(n)
        if n.op == "call_function" and _is_tpu(result):
            fake = n.meta.get("val")
            if isinstance(fake, torch.Tensor) and not _returns_alias(n) and _laid_out_otherwise(result, fake):
                relaid = torch.empty_strided(result.shape, fake.stride(), dtype=result.dtype, device=result.device)
                result = relaid.copy_(result)
                op = str(_producer(n))
                _stats["layout_copies"][op] = _stats["layout_copies"].get(op, 0) + 1
                self.compiled.relaid = True
        return result


def _producer(node):
    """The op that computed a node's result: the node's own, or for an item of a tuple
    result (getitem) the op that returned the tuple."""
    if node.target is operator.getitem and node.args and isinstance(node.args[0], torch.fx.Node):
        return node.args[0].target
    return node.target


def _returns_alias(node):
    """Whether a node's result is a view or an in-place result (whose layout is its input's)."""
    schema = getattr(_producer(node), "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _laid_out_otherwise(real, fake):
    shape, strides = tuple(fake.shape), tuple(fake.stride())
    if not all(type(s) is int for s in shape + strides) or tuple(real.shape) != shape:
        return False  # symbolic sizes: not checked
    if all(a == b for a, b, size in zip(real.stride(), strides, shape) if size > 1):
        return False
    from torch._prims_common import is_non_overlapping_and_dense_or_false
    return is_non_overlapping_and_dense_or_false(fake)


class HostPrelude:
    """The ops of a graph that read only CPU inputs and produce CPU values, split
    off to run on the host first. The rest of the graph (the device part) takes
    their results as trailing inputs in place of the CPU inputs it no longer reads."""

    def __init__(self, gm, host_inputs, kept_inputs, stacked):
        self.gm = gm
        self.host_inputs = host_inputs  # positions of the CPU inputs the host part reads
        self.kept_inputs = kept_inputs  # positions of the inputs the device part still reads
        self.stacked = stacked  # a StackedScalars, or None: run the graph op by op

    def run(self, args):
        host_args = [args[i] for i in self.host_inputs]
        kept = [args[i] for i in self.kept_inputs]
        if self.stacked is None:
            return kept + list(self.gm(*host_args))
        results = self.stacked.run(host_args)
        # A stacked result handed over whole travels as one upload; a 1-d CPU tensor
        # would leave the device part unsealable.
        device = next((a.device for a in kept if _is_tpu(a)), None)
        if device is not None:
            results = [r.to(device) if r.dim() == 1 else r for r in results]
        return kept + results

    @staticmethod
    def split(gm):
        """(HostPrelude or None, device graph). No split when nothing qualifies, or
        when it could change results: a host value that is not a 0-d tensor would
        make the device part unsealable, a value that the graph returns is not the
        device part's to return, and an input that the host part writes must not be
        read by the device part, directly or through a view handed over (it would
        see the new value, not the old). Random ops are never moved."""
        nodes = list(gm.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        cpu_inputs = {n for n in placeholders if _cpu_valued(n)}
        if not cpu_inputs:
            return None, gm
        host = set()
        for n in nodes:
            # Random ops stay where they are: moving them would reorder the CPU generator's draws.
            if n.op == "call_function" and _cpu_valued(n) and not _draws_random(n) and \
                    all(a in host or a in cpu_inputs for a in n.all_input_nodes):
                host.add(n)
        crossing = [n for n in nodes if n in host and any(u not in host for u in n.users)]
        written = {a for n in host for a in _written_inputs(n)}
        written_storages = {_storage_of(p) for p in written}
        if not crossing or any(u.op == "output" for n in crossing for u in n.users) or \
                any(not isinstance(n.meta["val"], torch.Tensor) or n.meta["val"].dim() != 0 for n in crossing) or \
                any(u not in host for p in written for u in p.users) or \
                any(_storage_of(n) in written_storages for n in crossing):  # a view of a written input
            return None, gm

        host_graph = torch.fx.Graph()
        env, host_inputs = {}, []
        for i, p in enumerate(placeholders):
            if any(u in host for u in p.users):
                env[p] = host_graph.placeholder(p.name)
                env[p].meta = dict(p.meta)
                host_inputs.append(i)
        for n in nodes:
            if n in host:
                env[n] = host_graph.node_copy(n, lambda a: env[a])
        host_graph.output(tuple(env[n] for n in crossing))
        host_gm = torch.fx.GraphModule(gm, host_graph)
        stacked = StackedScalars.plan(host_gm)

        # The device part's inputs from the host: each crossing value as a 0-d tensor of
        # its own, or, when the host part runs stacked, the stacked results whole (one
        # tensor per list, not one per element: an AdamW step hands over 2 instead of 2
        # per parameter), each crossing value a select of its element on the device.
        handover, inputs_for, whole_at = [], [], {}  # (entry, a crossing node it stands for); slot -> position
        for k, n in enumerate(crossing):
            slot, index = stacked.outputs[k] if stacked is not None else (None, None)
            if index is None:
                inputs_for.append((len(handover), None))
                handover.append((stacked.outputs[k] if stacked is not None else None, n))
                continue
            if slot not in whole_at:
                whole_at[slot] = len(handover)
                handover.append(((slot, _WHOLE), n))
            inputs_for.append((whole_at[slot], index))
        if stacked is not None:
            stacked.outputs = [entry for entry, _ in handover]

        graph = gm.graph
        inputs, last = [], placeholders[-1]
        for entry, n in handover:
            whole = entry is not None and entry[1] is _WHOLE
            with graph.inserting_after(last):
                last = graph.placeholder(n.name + ("_stack" if whole else "") + "_from_host")
            last.meta = dict(n.meta)
            if whole:
                val = n.meta["val"]
                with getattr(val, "fake_mode", None) or contextlib.nullcontext():
                    last.meta["val"] = torch.empty(stacked.lengths[entry[0]], dtype=val.dtype)
            inputs.append(last)
        for n, (k, index) in zip(crossing, inputs_for):
            if index is None:
                n.replace_all_uses_with(inputs[k])
                continue
            with graph.inserting_after(last):
                last = graph.call_function(torch.ops.aten.select.int, (inputs[k], 0, index))
            last.meta = dict(n.meta)
            n.replace_all_uses_with(last)
        for n in reversed(nodes):
            if n in host:
                graph.erase_node(n)
        kept_inputs = [i for i, p in enumerate(placeholders) if p.users or p not in cpu_inputs]
        for i, p in enumerate(placeholders):
            if i not in kept_inputs:
                graph.erase_node(p)
        graph.lint()
        gm.recompile()
        return HostPrelude(host_gm, host_inputs, kept_inputs, stacked), gm


class StackedScalars:
    """A host part run a list at a time. An optimizer's host part applies foreach
    ops to lists of 0-d CPU tensors (a step count per parameter): op by op, each
    foreach op is a boxed call whose CPU kernel loops over the list, and each
    count is written back by a copy_ of its own (1.3 ms a step for AdamW over 29
    parameters). Here each list is one 1-d tensor, each foreach op one call of its
    single-tensor op on it (`_foreach_pow.ScalarAndTensor` -> `pow.Scalar`), and the
    counts are written back by one `_foreach_copy_`. Elements are computed by the
    same kernels, vectorised (a transcendental one may differ in the last bit).

    Values live in slots: the inputs, then each step's stacked result. An element
    is (slot, index), or (slot, None) for an input's 0-d tensor."""

    def __init__(self, steps, outputs, writes, lengths):
        self.steps = steps      # (op, [(kind, ref)]): kind "list" (a slot), "stack" (elements), "element", "constant"
        self.outputs = outputs  # elements, or (slot, _WHOLE): a step's stacked result itself
        self.writes = writes    # (input slot, element)
        self.lengths = lengths  # step slot -> its list's length
        # The step slot whose elements, in order, are all the written values (an
        # optimizer's new step counts), or None.
        sources = [e for _, e in writes]
        self.written_from = sources[0][0] if sources and sources[0][1] is not None and \
            sources == [(sources[0][0], k) for k in range(lengths.get(sources[0][0], -1))] else None

    @staticmethod
    def plan(gm):
        """The plan for `gm`, or None when some node is not a foreach op on 0-d CPU
        tensors of one dtype per list, an element of its result, or a write-back."""
        nodes = list(gm.graph.nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        if not all(_cpu_scalar(n.meta.get("val")) for n in placeholders):
            return None
        slot = {n: k for k, n in enumerate(placeholders)}
        lengths = {}  # foreach node -> its list's length

        def element(node):
            return (slot[node], None) if node in placeholders else (slot[node.args[0]], node.args[1])

        def ref(a):
            if isinstance(a, (list, tuple)):
                source = a[0].args[0] if a[0] not in placeholders else None
                whole = source is not None and len(a) == lengths[source] and \
                    all(e.args == (source, k) for k, e in enumerate(a))
                if whole:
                    return ("list", slot[source])
                if all(e in placeholders for e in a):
                    return ("inputs", [slot[e] for e in a])
                return ("stack", [element(e) for e in a])
            return ("element", element(a)) if isinstance(a, torch.fx.Node) else ("constant", a)

        steps, writes, write_nodes, elements, outputs = [], [], [], set(), None
        for n in nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                outputs = list(n.args[0])
                continue
            if n.op != "call_function":
                return None
            if n.target is operator.getitem and n.args[0] in lengths:
                elements.add(n)
                continue
            if n.target is torch.ops.aten.copy_.default and n.args[0] in placeholders and not n.users and \
                    len(n.args) == 2 and not n.kwargs and n.args[1] in elements and \
                    n.args[0].meta["val"].dtype == n.args[1].meta["val"].dtype:
                writes.append((slot[n.args[0]], element(n.args[1])))
                write_nodes.append(n)
                continue
            op = _stacked_op(n)
            if op is None:
                return None
            values = n.meta.get("val")
            if not isinstance(values, (list, tuple)) or not values or \
                    not all(_cpu_scalar(v) and v.dtype == values[0].dtype for v in values):
                return None
            for a in n.args:
                if isinstance(a, (list, tuple)):
                    if len(a) != len(values) or not all(isinstance(e, torch.fx.Node) for e in a) or \
                            len({e.meta["val"].dtype for e in a}) != 1:
                        return None
                elif isinstance(a, torch.fx.Node) and not _cpu_scalar(a.meta.get("val")):
                    return None
            if not _same_stacked_type(op, n.args, values):
                return None
            steps.append((op, [ref(a) for a in n.args]))
            lengths[n] = len(values)
            slot[n] = len(placeholders) + len(steps) - 1
        if outputs is None or not writes and not outputs or \
                not all(o in elements or o in placeholders for o in outputs):
            return None
        # Write-backs come after every read of their destination (functionalisation
        # puts them last): reads then see the old counts, as in the graph.
        position = {n: k for k, n in enumerate(nodes)}
        for n in write_nodes:
            if any(position[u] > position[n] for u in n.args[0].users if u is not n):
                return None
        return StackedScalars(steps, [element(o) for o in outputs], writes, {slot[n]: k for n, k in lengths.items()})

    def run(self, args):
        values = list(args)  # slot -> a 0-d input tensor or a step's stacked 1-d tensor
        unbound = {}  # step slot -> its elements, unbound once per call

        def element(slot, k):
            if k is None:  # an input's 0-d tensor
                return values[slot]
            e = unbound.get(slot)
            if e is None:
                e = unbound[slot] = values[slot].unbind(0)
            return e[k]

        for op, arg_refs in self.steps:
            resolved = []
            for kind, ref in arg_refs:
                resolved.append(values[ref] if kind == "list" else
                                torch.stack([values[slot] for slot in ref]) if kind == "inputs" else
                                torch.stack([element(*e) for e in ref]) if kind == "stack" else
                                element(*ref) if kind == "element" else ref)
            values.append(op(*resolved))
        results = [values[slot] if k is _WHOLE else element(slot, k) for slot, k in self.outputs]
        if self.writes:
            whole = self.written_from
            if whole is not None and whole not in unbound:
                unbound[whole] = values[whole].unbind(0)
            torch._foreach_copy_([values[d] for d, _ in self.writes],
                                 unbound[whole] if whole is not None else [element(*e) for _, e in self.writes])
        return results


def _stacked_op(node):
    """The pointwise single-tensor overload that takes a foreach op's arguments with
    each list a tensor (`_foreach_pow.ScalarAndTensor(Scalar, Tensor[])` ->
    `pow.Scalar(Scalar, Tensor)`), or None: a reduction (`_foreach_norm`) or an op
    with keyword arguments stays a foreach op."""
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.name.startswith("aten::_foreach_") or node.kwargs or \
            any(a.alias_info is not None for a in schema.arguments):
        return None
    wanted = [str(a.type).replace("List[Tensor]", "Tensor") for a in schema.arguments if not a.kwarg_only]
    packet = getattr(torch.ops.aten, schema.name[len("aten::_foreach_"):], None)
    for name in packet.overloads() if packet is not None else ():
        op = getattr(packet, name)
        positional = [a for a in op._schema.arguments if not a.kwarg_only]
        if torch.Tag.pointwise in op.tags and len(op._schema.returns) == 1 and \
                not any(a.alias_info is not None for a in op._schema.arguments) and \
                [str(a.type) for a in positional[:len(wanted)]] == wanted and \
                all(a.has_default_value() for a in op._schema.arguments[len(wanted):]):
            return op
    return None


def _same_stacked_type(op, args, values):
    """Whether `op` on the stacked lists gives the foreach op's dtype: a 0-d tensor
    argument promotes a 0-d list element, not a 1-d list (float32 list, float64 0-d
    tensor)."""
    def meta(a):
        if isinstance(a, (list, tuple)):
            return torch.empty(len(a), dtype=a[0].meta["val"].dtype, device="meta")
        if isinstance(a, torch.fx.Node):
            return torch.empty((), dtype=a.meta["val"].dtype, device="meta")
        return a

    try:
        result = op(*[meta(a) for a in args])
    except Exception:  # noqa: BLE001 - any failure: leave the op to run as it is
        return False
    return isinstance(result, torch.Tensor) and result.dtype == values[0].dtype and \
        tuple(result.shape) == (len(values),)


def _cpu_scalar(value):
    return isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() == 0


def _cpu_valued(node):
    """Whether a node's value is a CPU tensor or a nonempty list of them."""
    value = node.meta.get("val")
    values = value if isinstance(value, (list, tuple)) else [value]
    return bool(values) and all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in values)


def _draws_random(node):
    return torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())


def _storage_of(node):
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(node.meta["val"].untyped_storage())


def _written_inputs(node):
    """The input nodes that an op writes (copy_'s destination, an in-place op's self)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    written = []
    for k, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = node.args[k] if k < len(node.args) else node.kwargs.get(arg.name)
            written += [v for v in (value if isinstance(value, (list, tuple)) else [value])
                        if isinstance(v, torch.fx.Node)]
    return written


_TENSOR = object()  # a program result in a sealed graph's output layout
_EXACT = object()  # a padded call that must run with exact shapes instead
_WHOLE = object()  # in place of an element's index: the whole stacked result
_PADDED_CALLS_KEPT = 4096  # real sizes remembered per graph (forgotten all at once past it)


class _PaddedCall:
    """What a padded call at one set of real sizes needs, worked out once for those
    sizes: the buckets, each argument's real and padded shape, the program key,
    the real-size inputs, and how each output is cut back (a decode step otherwise
    evaluates its layouts' symbolic sizes anew on every call)."""

    @staticmethod
    def prepare(graph, plan, real):
        padded = _buckets.choose_buckets(plan, real)
        if padded is None:
            return _EXACT
        ev = _buckets.eval_expr
        if any(ev(f, padded) < ev(f, real) for f in plan.real_exprs):
            return _EXACT
        call = _PaddedCall()
        call.real, call.padded = real, padded
        call.inputs = []
        for node in graph._placeholders():
            val = node.meta.get("val")
            layout = plan.layouts.get(node) if node in plan.layouts else None
            if isinstance(val, torch.SymInt):
                call.inputs.append(("size", ev(_buckets._expr(val), padded)))
            elif layout is not None:
                call.inputs.append(("tensor", (layout, _buckets.layout_shape(layout, padded),
                                               _buckets.layout_shape(layout, real),
                                               node.name in plan.mutated_placeholders)))
            else:
                call.inputs.append(("pass", None))
        n = len(call.inputs)
        padded_sizes = {f: ev(f, padded) for f in plan.real_exprs}
        numbers = list(plan.value_exprs.items())
        call.extra = [torch.tensor(ev(f, real), dtype=torch.int64) for f in plan.real_exprs]
        call.extra += [_buckets.value_tensor(e, kind, real) for e, kind in numbers]
        k = n + len(plan.real_exprs)

        def run_padded(*all_args):
            reals = dict(zip(plan.real_exprs, all_args[n:k]))
            values = dict(zip((e for e, _ in numbers), all_args[k:]))
            return _buckets.PaddedInterpreter(plan, padded_sizes, reals, values).run(*all_args[:n])

        call.run_padded = run_padded
        call.key = ("padded",) + tuple(sorted((str(s), v) for s, v in padded.items()))
        out_node = next(n for n in graph.gm.graph.nodes if n.op == "output")
        nodes = out_node.args[0]
        nodes = list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]
        descs = out_node.meta.get("desc") or [None] * len(nodes)
        call.outputs = []
        for node, desc in zip(nodes, descs):
            val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
            if isinstance(val, torch.SymInt):
                call.outputs.append(("size", ev(_buckets._expr(val), real)))
            elif isinstance(node, torch.fx.Node) and not type(desc).__name__.startswith("SavedForBackwards"):
                call.outputs.append(("tensor", plan.layout(node)))
            else:
                call.outputs.append(("pass", None))
        return call


def _handover_layouts(fw_plan, bw_gm):
    """Layouts of the tensors a padded forward graph hands to its backward graph: the
    saved tensors (same node names in both graphs) stay padded; tangents (gradients of
    the forward's user outputs, which were sliced) arrive with real sizes."""
    fw_out = next(n for n in fw_plan.gm.graph.nodes if n.op == "output")
    outputs = list(fw_out.args[0])
    descs = fw_out.meta.get("desc") or [None] * len(outputs)
    by_name, plain = {}, {}
    for node, desc in zip(outputs, descs):
        if not isinstance(node, torch.fx.Node):
            continue
        name = type(desc).__name__
        if name.startswith("SavedForBackwards"):
            by_name[node.name] = fw_plan.layout(node)
        elif name == "PlainAOTOutput":
            plain[desc.idx] = fw_plan.layout(node)
    layouts, saved = {}, set()
    for node in bw_gm.graph.nodes:
        if node.op != "placeholder":
            continue
        if node.name in by_name and by_name[node.name] is not None:
            layouts[node.name] = by_name[node.name]
            saved.add(node.name)
        desc = node.meta.get("desc")
        output = getattr(desc, "output", None)
        if type(output).__name__ == "PlainAOTOutput" and plain.get(output.idx) is not None:
            layouts[node.name] = plain[output.idx]
    return layouts, saved


def _decompositions(example_inputs):
    """Core-ATen decompositions. For graphs with static shapes, not those of the
    backward ops that tpu lowers itself (layer norm, softmax, GELU, embedding,
    NLL loss backward, ...): their own lowerings give XLA a faster program than
    the decompositions do (a compiled gpt-small backward: 172 -> 162 ms,
    interleaved in one process). Forward ops keep their decompositions, which
    fuse better with their neighbours. Graphs with symbolic sizes keep them all:
    the padding analysis (_buckets.py) knows the core ops."""
    from torch._decomp import core_aten_decompositions

    table = core_aten_decompositions()
    if _has_symbolic_sizes(example_inputs):
        return table
    return {op: fn for op, fn in table.items()
            if not ("backward" in op.name() and
                    torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1"))}


def _has_symbolic_sizes(example_inputs):
    for a in example_inputs:
        if isinstance(a, torch.SymInt):
            return True
        if isinstance(a, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in a.shape):
            return True
    return False


def _boxed(compiled):
    """`compiled` in AOTAutograd's boxed calling convention: the arguments come as one
    list, which the callee empties, so the caller's list holds no saved activation
    past the call (and AOTAutograd does not warn about an unboxed compiler)."""
    def call(args):
        own = list(args)
        args.clear()
        return compiled(*own)

    call._boxed_call = True
    call.compiled_graph = compiled
    return call


def tpu_backend(gm, example_inputs, **kwargs):
    """The torch.compile backend: AOTAutograd over core-ATen decompositions."""
    from torch._dynamo.backends.common import aot_autograd

    # The forward and backward graphs of one Dynamo graph are paired: a padded forward
    # hands its saved tensors to the backward padded.
    pair = {}

    def forward_compiler(fw_gm, example_inputs):
        pair["forward"] = CompiledGraph(fw_gm)
        return _boxed(pair["forward"])

    def backward_compiler(bw_gm, example_inputs):
        return _boxed(CompiledGraph(bw_gm, forward=pair.get("forward")))

    backend = aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler,
                           decompositions=_decompositions(example_inputs), keep_inference_input_mutations=True)
    return backend(gm, example_inputs, **kwargs)


tpu_backend._tags = ()  # what dynamo's registry expects of a backend


def _register_tpu(registry):
    # Installed, the package's torch_dynamo_backends entry point names "tpu" too;
    # registering here also serves a source checkout on PYTHONPATH. Once dynamo has
    # found the entry point, it registers the backend itself when it loads it (which
    # may be what imports torch_tpu): registering first would make that a duplicate.
    if "tpu" in registry._COMPILER_FNS or isinstance(registry._BACKENDS.get("tpu"), importlib.metadata.EntryPoint):
        return
    registry.register_backend(compiler_fn=tpu_backend, name="tpu")


def _register_openxla_alias(torchxla):
    # Points backend="openxla" at tpu_backend when torch_xla is not installed:
    # code written for PyTorch/XLA then runs unchanged.
    from torch._dynamo.backends import registry

    if importlib.util.find_spec("torch_xla") is None:
        registry._COMPILER_FNS["openxla"] = tpu_backend


def _capturable_optimizers_on_tpu(optimizer_module):
    """A compiled optimizer over tpu parameters keeps its step counts on tpu, as over CUDA.

    Dynamo sets `capturable` on a fresh optimizer's groups (its step counts then live on
    the parameters' device and the step is one device program) only when every parameter
    is a CUDA or XPU tensor. On tpu the counts stayed 0-d CPU tensors: every compiled
    step then ran a host prelude (stack the counts, increment, unbind, copy back), 18% of
    a compiled gpt-nano AdamW step. The same rule, extended to tpu parameters."""
    variable = optimizer_module.OptimizerVariable
    dynamo_set_capturable = variable._set_capturable
    if getattr(dynamo_set_capturable, "_torch_tpu", False):
        return

    def _set_capturable(self, tx):
        for group in self.value.param_groups:
            params = group.get("params", [])
            if "capturable" in group and params and \
                    all(_is_tpu(p) and p not in self.value.state for p in params):
                group["capturable"] = True
        return dynamo_set_capturable(self, tx)

    _set_capturable._torch_tpu = True
    _set_capturable.__wrapped__ = dynamo_set_capturable
    variable._set_capturable = _set_capturable


# Dynamo's modules are imported lazily (importing them costs about a second), so
# each is adapted when dynamo imports it, by a hook on the module.
_REGISTRATIONS = {
    "torch._dynamo.backends.registry": _register_tpu,
    "torch._dynamo.backends.torchxla": _register_openxla_alias,  # defines "openxla" itself
    "torch._dynamo.variables.optimizer": _capturable_optimizers_on_tpu,
}


class _BackendRegistrar(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs a module's registration from _REGISTRATIONS right after the module is executed."""

    def find_spec(self, name, path, target=None):
        if name not in _REGISTRATIONS or name in sys.modules:
            return None
        # Asks the finders after this one, without touching sys.meta_path: another
        # thread may be iterating it.
        spec = None
        for finder in list(sys.meta_path):
            if isinstance(finder, _BackendRegistrar) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None:
            return None
        spec.loader_state = (spec.loader, spec.loader_state)
        spec.loader = self
        return spec

    def create_module(self, spec):
        return spec.loader_state[0].create_module(spec)

    def exec_module(self, module):
        inner, state = module.__spec__.loader_state
        module.__spec__.loader, module.__spec__.loader_state = inner, state
        module.__loader__ = inner
        inner.exec_module(module)
        _run_registration(module.__name__)


def _run_registration(name):
    # The hook stays in sys.meta_path afterwards (removing it could race with imports on
    # other threads); for every other module it returns at its first line.
    _REGISTRATIONS[name](sys.modules[name])


def _graph_on_tpu(gm, example_inputs):
    """Whether a Dynamo graph computes on tpu: an input, or a value it makes, is a tpu tensor."""
    if any(_is_tpu(t) for t in example_inputs):
        return True
    for node in gm.graph.nodes:
        value = node.meta.get("example_value", node.meta.get("val"))
        if _is_tpu(value) or (isinstance(value, (tuple, list)) and any(_is_tpu(v) for v in value)):
            return True
    return False


def _route_default_backend_on_tpu():
    """torch.compile's default backend (inductor) compiles a graph on tpu with tpu_backend.

    PyTorch's inductor knows a "tpu" device of its own: a Pallas code generator that
    imports another project's module (`torch_tpu._internal.pallas`), so code written for
    CUDA, `torch.compile(model)` with no backend, failed on tpu tensors with
    ModuleNotFoundError. Graphs on other devices still go to inductor; inductor's modes
    and options do not apply to a tpu graph."""
    wrapper = torch._TorchCompileInductorWrapper
    inductor_call = wrapper.__call__
    if getattr(inductor_call, "_torch_tpu", False):
        return

    # Keyword arguments pass through as given: torch 2.13 added config_patches, and an
    # older torch rejects it.
    def __call__(self, model_, inputs_, **kwargs):
        if _graph_on_tpu(model_, inputs_):
            _stats["default_backend_graphs"] += 1
            return tpu_backend(model_, inputs_)
        return inductor_call(self, model_, inputs_, **kwargs)

    __call__._torch_tpu = True
    wrapper.__call__ = __call__


def _grouped_mm_on_tpu(fake_mode, func, mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch._grouped_mm of fake tpu tensors. PyTorch's meta function checks CUDA's
    kernel's limits (bfloat16 inputs only), which tpu's (any float dtype, as CPU's) does
    not have: a float32 mixture of experts would not trace. Other devices keep it."""
    from torch._meta_registrations import _create_grouped_mm_output_tensor
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    device = getattr(mat_a, "fake_device", None)
    if device is None or device.type != torch._C._get_privateuse1_backend_name() or bias is not None:
        return NotImplemented
    torch._check(mat_a.dtype == mat_b.dtype and mat_a.is_floating_point(),
                 lambda: "grouped_mm: expected floating inputs of one dtype, got %s and %s" % (mat_a.dtype, mat_b.dtype))
    torch._check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3),
                 lambda: "Multiplicands must be 2D or 3D but got mat_a.dim()=%d and mat_b.dim()=%d" % (
                     mat_a.dim(), mat_b.dim()))
    torch._check(offs is not None or (mat_a.dim() == 3 and mat_b.dim() == 3),
                 lambda: "grouped_mm: offs is needed unless both inputs are 3D")
    with in_kernel_invocation_manager(fake_mode):
        out = _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype or mat_a.dtype)
    return FakeTensor(fake_mode, out, device)


def _register_fake_kernels():
    from torch._subclasses.fake_impls import register_op_impl

    register_op_impl(lambda func: func is torch.ops.aten._grouped_mm.default)(_grouped_mm_on_tpu)


def install_backends():
    """Registers backend="tpu" (and "openxla") with dynamo: now if dynamo is imported, else when it is;
    and routes the default backend's graphs on tpu to backend="tpu"."""
    _register_fake_kernels()
    _route_default_backend_on_tpu()
    for name in _REGISTRATIONS:
        if name in sys.modules:
            _run_registration(name)
    if not all(n in sys.modules for n in _REGISTRATIONS) and not any(
            isinstance(f, _BackendRegistrar) for f in sys.meta_path):
        sys.meta_path.insert(0, _BackendRegistrar())
