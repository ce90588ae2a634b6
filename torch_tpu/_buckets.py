"""Bounded dynamic shapes for torch.compile(backend="tpu"): pad to buckets, mask, slice.

With dynamic=True (or mark_dynamic) AOTAutograd hands us graphs whose sizes are
symbols (s0, s1, ...). Sealing one program per concrete size would compile again
for every sequence length, so each symbol's value is rounded up to a *bucket* and
the graph runs on padded tensors; the program depends only on the buckets.

Exactness. Every value of the padded graph holds the real (unpadded) value in its
*valid region* and arbitrary data elsewhere. Each dimension of a value has a
layout: a row-major list of factors (sympy expressions of the symbols; a merged
[batch, seq] dimension has two). An index is valid when each of its factor digits
is below that factor's real size. A static pass (`analyze`) propagates layouts
through the ATen graph and decides, per op, what keeps the valid region exact:

- pointwise ops, views, permutes, expands, gathers, embeddings, layer norm over
  unpadded dims: nothing (garbage stays in the padding);
- reductions over a padded dim (sum, mean, var, amax/amin, max/min, argmax/argmin,
  prod, any/all, logsumexp, softmax/log_softmax): the padding is filled with the
  reduction's identity first; means divide by the real count;
- mm/bmm/addmm/dot contracting a padded dim: both operands' padding is zeroed;
- index_put(accumulate)/scatter_add: the padding of the added values is zeroed;
- cat along a padded dim (a KV cache growing): pieces are placed at their real
  offsets (gather + select), so new entries land right after the valid region;
- select with a negative index on a padded dim: indexes from the real end;
- copy_ into a graph input: the padding keeps the input's old contents.

Anything else touching a padded dim (or a symbol used as a value rather than a
size) makes the graph unsupported: it runs with exact shapes, as without
buckets, and the reason is counted in torch_tpu._compile.stats().

The real sizes enter the program as 0-d integer inputs, so they never key it.
Outputs are sliced back to their real sizes (views when the layout allows, a
copy for a merged dim); tensors saved for the backward graph stay padded.
"""
import math
import operator

import sympy
import torch
import torch.fx

from ._bucket_policy import policy

aten = torch.ops.aten


class Unsupported(Exception):
    pass


# ---------------------------------------------------------------- layouts

_ONE = sympy.Integer(1)


def _expr(d):
    if isinstance(d, torch.SymInt):
        return sympy.sympify(d.node.expr)
    return sympy.Integer(int(d))


def _same(a, b):
    return a == b or sympy.expand(a - b) == 0


def _padded_factor(f):
    return bool(f.free_symbols)


def _dim_padded(dim):
    return any(_padded_factor(f) for f in dim)


def _layout_padded(layout):
    return any(_dim_padded(d) for d in layout)


def _plain_layout(val):
    return tuple((_expr(d),) for d in val.shape)


def _product(factors):
    p = _ONE
    for f in factors:
        p = p * f
    return p


def _is_tensor_val(v):
    return isinstance(v, torch.Tensor)


_POINTWISE_EXTRA = {
    aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar,
    aten._to_copy.default, aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default,
    aten.full_like.default, aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default,
    aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten.detach.default, torch.ops.prims.convert_element_type.default,
}
_CREATION = {
    aten.full.default, aten.zeros.default, aten.ones.default, aten.empty.memory_format,
    aten.scalar_tensor.default, aten.arange.default, aten.arange.start, aten.arange.start_step,
    aten.new_full.default, aten.new_zeros.default, aten.new_ones.default, aten.new_empty.default,
    aten.empty_strided.default, aten.new_empty_strided.default,
}
_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
# reduction op -> (identity for the padding: "zero", "one", "min", "max", "false", "true" or "mean"/"var")
_REDUCTIONS = {
    aten.sum.dim_IntList: "zero", aten.sum.default: "zero", aten.mean.dim: "mean", aten.mean.default: "mean",
    aten.amax.default: "min", aten.amin.default: "max", aten.max.dim: "min", aten.min.dim: "max",
    aten.argmax.default: "min", aten.argmin.default: "max", aten.prod.dim_int: "one", aten.prod.default: "one",
    aten.any.dim: "false", aten.any.dims: "false", aten.any.default: "false",
    aten.all.dim: "true", aten.all.dims: "true", aten.all.default: "true",
    aten.logsumexp.default: "min", aten._softmax.default: "min", aten._log_softmax.default: "min",
    aten.var.correction: "var", aten.var_mean.correction: "var",
}
# where a symbolic size may appear as a size (padded sizes are the bucket values there)
_SIZE_ARGS = {
    aten.view.default: {1}, aten._unsafe_view.default: {1}, aten.reshape.default: {1}, aten.expand.default: {1},
    aten.full.default: {0}, aten.zeros.default: {0}, aten.ones.default: {0}, aten.empty.memory_format: {0},
    aten.empty_strided.default: {0, 1}, aten.new_full.default: {1}, aten.new_zeros.default: {1},
    aten.new_ones.default: {1}, aten.new_empty.default: {1}, aten.new_empty_strided.default: {1, 2},
    aten.arange.default: {0}, aten.arange.start: {1}, aten.arange.start_step: {1},
    aten.slice.Tensor: {3},  # the end only: a symbolic start would shift the rows
}
_IGNORED = {aten._assert_tensor_metadata.default, aten._assert_scalar.default,
            aten.sym_constrain_range_for_size.default}
_PREFIX_SCANS = {aten.cumsum.default, aten.cumprod.default, aten.cummax.default, aten.cummin.default}


def _tensor_overload(target):
    """aten.mul.Scalar -> aten.mul.Tensor: the overload taking a 0-d tensor for the number."""
    packet = getattr(target, "overloadpacket", None)
    if packet is None:
        return None
    if target._overloadname in ("Tensor", "self", "Tensor_Tensor"):
        return target
    for name in ("Tensor", "Tensor_Tensor", "self"):
        if hasattr(packet, name):
            return getattr(packet, name)
    return None


def _is_sym_op(target):
    if target is operator.getitem:
        return False
    return getattr(target, "__module__", None) in ("_operator", "operator") or target in (
        aten.sym_size.int, aten.sym_numel.default, aten.sym_stride.int, torch.sym_float, torch.sym_int,
        torch.sym_max, torch.sym_min, math.floor, math.ceil)


def _contains_symint_node(a):
    if isinstance(a, torch.fx.Node):
        return isinstance(a.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool))
    if isinstance(a, (list, tuple)):
        return any(_contains_symint_node(x) for x in a)
    return False


def _norm_dims(dims, ndim):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if ndim == 0:
        return []  # a 0-dim tensor's dim 0 (or -1) names no real dimension
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % ndim for d in dims})


class Plan:
    """The static analysis of one graph: layouts per node and whether it can be padded."""

    def __init__(self, gm, input_layouts=None):
        self.gm = gm
        self.layouts = {}
        self.reason = None
        self.symbols = set()
        self.shape_env = None
        self.mutated_placeholders = set()
        self.value_exprs = {}  # symbolic values used as numbers -> "int" / "float" / "bool"
        self.saved_inputs = set()  # placeholders that a padded forward graph hands over padded
        self.guard_cache = {}
        try:
            self._analyze(input_layouts or {})
        except Unsupported as e:
            self.reason = str(e)
            # The pass stopped at that node: a graph without symbolic sizes is static
            # whatever ops it holds (torch.compile keeps some backward ops undecomposed
            # in static graphs, which the pass does not know).
            try:
                for node in gm.graph.nodes:
                    self._collect_symbols(node.meta.get("val"))
            except Unsupported as data_dependent:
                self.reason = str(data_dependent)
        if not self.symbols and self.reason != "data-dependent size":
            self.reason = "static"  # nothing to pad
        self.real_exprs = sorted({f for lay in self._all_layouts() for d in lay for f in d if _padded_factor(f)},
                                 key=str) if self.reason is None else []

    @property
    def supported(self):
        return self.reason is None

    def _all_layouts(self):
        for v in self.layouts.values():
            if isinstance(v, list):
                yield from (x for x in v if x is not None)
            elif v is not None:
                yield v

    def layout(self, node):
        return self.layouts.get(node) if isinstance(node, torch.fx.Node) else None

    # -- the pass
    def _analyze(self, input_layouts):
        for node in self.gm.graph.nodes:
            val = node.meta.get("val")
            self._collect_symbols(val)
            if node.op == "placeholder":
                if _is_tensor_val(val):
                    given = input_layouts.get(node.name)
                    self.layouts[node] = given if given is not None else _plain_layout(val)
                continue
            if node.op == "output":
                continue
            if node.op == "get_attr":  # a constant: static sizes
                if _is_tensor_val(val):
                    self.layouts[node] = _plain_layout(val)
                continue
            if node.op != "call_function":
                raise Unsupported(f"{node.op} node")
            if _is_sym_op(node.target) or node.target in _IGNORED:
                continue
            target = node.target
            for i, a in enumerate(list(node.args) + list(node.kwargs.values())):
                if _contains_symint_node(a) and i not in _SIZE_ARGS.get(target, ()):
                    self._value_arg(node, i, a)
            self.layouts[node] = self._rule(node, target, val)

    def _collect_symbols(self, val):
        vals = val if isinstance(val, (list, tuple)) else [val]
        for v in vals:
            exprs = []
            if _is_tensor_val(v):
                exprs = [_expr(d) for d in v.shape]
                env = getattr(getattr(v, "fake_mode", None), "shape_env", None)
                if env is not None:
                    self.shape_env = env
            elif isinstance(v, torch.SymInt):
                exprs = [_expr(v)]
                self.shape_env = v.node.shape_env
            for e in exprs:
                for s in e.free_symbols:
                    if not str(s).startswith("s"):  # unbacked (data-dependent) sizes
                        raise Unsupported("data-dependent size")
                    self.symbols.add(s)

    def _arg_layout(self, a):
        if isinstance(a, torch.fx.Node):
            lay = self.layouts.get(a)
            if lay is None and _is_tensor_val(a.meta.get("val")):
                raise Unsupported(f"no layout for {a.name}")
            return lay
        return None

    def _rule(self, node, target, val):
        args = node.args
        if target is operator.getitem:
            src = self.layouts.get(args[0])
            return src[args[1]] if isinstance(src, list) else None
        if not _is_tensor_val(val) and not (isinstance(val, (list, tuple)) and any(_is_tensor_val(v) for v in val)):
            if val is None:  # an op returning nothing (copy_ into an input returns it)
                pass
            return None
        if target in _CREATION:
            return _plain_layout(val)
        if target in _IGNORED:
            return None
        tags = getattr(target, "tags", ())
        if torch.Tag.pointwise in tags or target in _POINTWISE_EXTRA:
            return self._broadcast(node, val, [a for a in list(args) + list(node.kwargs.values())])
        if target in _VIEWS:
            return self._view(self._arg_layout(args[0]), val)
        if target is aten.permute.default:
            src = self._arg_layout(args[0])
            return tuple(src[d % len(src)] for d in args[1])
        if target in (aten.transpose.int,):
            src = list(self._arg_layout(args[0]))
            a, b = args[1] % len(src), args[2] % len(src)
            src[a], src[b] = src[b], src[a]
            return tuple(src)
        if target is aten.t.default:
            return tuple(reversed(self._arg_layout(args[0])))
        if target is aten.expand.default:
            src = self._arg_layout(args[0])
            out = _plain_layout(val)
            off = len(out) - len(src)
            return tuple(src[i - off] if i >= off and _same(_product(src[i - off]), out[i][0]) else out[i]
                         for i in range(len(out)))
        if target is aten.unsqueeze.default:
            src = list(self._arg_layout(args[0]))
            src.insert(args[1] % (len(src) + 1), (_ONE,))
            return tuple(src)
        if target in (aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default):
            src = self._arg_layout(args[0])
            dims = range(len(src)) if target is aten.squeeze.default else _norm_dims(args[1], len(src))
            return tuple(d for i, d in enumerate(src) if not (i in dims and _same(_product(d), _ONE)))
        if target is aten.slice.Tensor:
            return self._slice(node, val)
        if target is aten.select.int:
            src = self._arg_layout(args[0])
            dim = args[1] % len(src)
            if _dim_padded(src[dim]):
                if len(src[dim]) != 1 or not isinstance(args[2], int):
                    raise Unsupported("select on a merged padded dim")
                self._mark(node, "select_real" if args[2] < 0 else None)
            return tuple(d for i, d in enumerate(src) if i != dim)
        if target is aten.cat.default:
            return self._cat(node, val)
        if target in (aten.split_with_sizes.default, aten.split.Tensor):
            src = self._arg_layout(args[0])
            dim = (args[2] if len(args) > 2 else node.kwargs.get("dim", 0)) % len(src)
            if _dim_padded(src[dim]):
                raise Unsupported(f"{target} along a padded dim")
            return [tuple(src[:dim]) + ((_expr(v.shape[dim]),),) + tuple(src[dim + 1:]) for v in val]
        if target in _REDUCTIONS:
            return self._reduction(node, target, val)
        if target in _PREFIX_SCANS:
            src = self._arg_layout(args[0])
            return [src, src] if isinstance(val, (list, tuple)) else src
        if target in (aten.mm.default, aten.bmm.default, aten.addmm.default, aten.dot.default, aten.mv.default,
                      aten.baddbmm.default):
            return self._matmul(node, target, val)
        if target is aten.embedding.default:
            weight, idx = self._arg_layout(args[0]), self._arg_layout(args[1])
            return tuple(idx) + tuple(weight[1:])
        if target is aten.index_select.default:
            src, idx = self._arg_layout(args[0]), self._arg_layout(args[2])
            dim = args[1] % len(src)
            return tuple(src[:dim]) + (idx[0] if idx else (_ONE,),) + tuple(src[dim + 1:])
        if target is aten.gather.default:
            src, idx = self._arg_layout(args[0]), self._arg_layout(args[2])
            dim = args[1] % len(src)
            self._check_aligned(src, idx, skip=dim, what="gather")
            return idx
        if target in (aten.scatter.value, aten.scatter.src, aten.scatter_add.default, aten.scatter_reduce.two):
            src, idx = self._arg_layout(args[0]), self._arg_layout(args[2])
            dim = args[1] % len(src)
            self._check_aligned(src, idx, skip=dim, what="scatter")
            if _dim_padded(idx[dim]):
                if target is not aten.scatter_add.default:
                    raise Unsupported(f"{target} with padded indices along its dim")
                self._mark(node, "mask_scatter_add")
            return src
        if target is aten.index_put.default:
            src = self._arg_layout(args[0])
            accumulate = args[3] if len(args) > 3 else node.kwargs.get("accumulate", False)
            values = self._arg_layout(args[2])
            if _layout_padded(values) or any(_layout_padded(self._arg_layout(i)) for i in args[1] if i is not None):
                if not accumulate:
                    raise Unsupported("index_put with padded indices")
                self._mark(node, "mask_index_put")
            return src
        if target is aten.native_layer_norm.default:
            src = self._arg_layout(args[0])
            k = len(args[1])
            if any(_dim_padded(d) for d in src[len(src) - k:]):
                raise Unsupported("layer norm over a padded dim")
            stat = tuple(src[:len(src) - k]) + ((_ONE,),) * k
            return [src, stat, stat]
        if target is aten.copy_.default:
            dst = self._arg_layout(args[0])
            self._broadcast(node, val, [args[0], args[1]])
            if args[0].op == "placeholder":
                self.mutated_placeholders.add(args[0].name)
                if _layout_padded(dst):
                    self._mark(node, "masked_copy")
            return dst
        raise Unsupported(str(target))

    def _value_arg(self, node, i, a):
        """A size used as a number (a mean's backward divides by the length): the real
        value enters the program as a 0-d input instead of the bucket."""
        target = node.target
        if not (isinstance(a, torch.fx.Node) and i < len(node.args) and (target is aten.scalar_tensor.default or (
                torch.Tag.pointwise in getattr(target, "tags", ()) and _tensor_overload(target) is not None))):
            raise Unsupported(f"symbolic size used as a value in {target}")
        expr = sympy.sympify(a.meta["val"].node.expr)
        if expr.free_symbols - self.symbols or any(not str(s).startswith("s") for s in expr.free_symbols):
            raise Unsupported(f"symbolic size used as a value in {target}")
        kind = "float" if isinstance(a.meta["val"], torch.SymFloat) else \
            "bool" if isinstance(a.meta["val"], torch.SymBool) else "int"
        node.meta.setdefault("tpu_value_args", []).append((i, expr))
        self.value_exprs.setdefault(expr, kind)

    def _mark(self, node, action):
        if action is not None:
            node.meta["tpu_pad_action"] = action
        else:
            node.meta.pop("tpu_pad_action", None)

    def _check_aligned(self, a, b, skip, what):
        for i in range(min(len(a), len(b))):
            if i != skip and (_dim_padded(a[i]) or _dim_padded(b[i])) and a[i] != b[i]:
                raise Unsupported(f"{what} with misaligned padded dims")

    def _broadcast(self, node, val, operands):
        out = _plain_layout(val) if _is_tensor_val(val) else None
        if out is None:
            return None
        n = len(out)
        dims = [None] * n
        for a in operands:
            lay = self._arg_layout(a) if isinstance(a, torch.fx.Node) else None
            if isinstance(a, (list, tuple)):
                continue
            if lay is None:
                continue
            off = n - len(lay)
            for i, d in enumerate(lay):
                if _same(_product(d), _ONE):
                    continue
                j = i + off
                if dims[j] is None:
                    dims[j] = d
                elif dims[j] != d:
                    if _dim_padded(d) or _dim_padded(dims[j]):
                        raise Unsupported(f"{node.target}: operands padded differently")
        return tuple(dims[i] if dims[i] is not None else out[i] for i in range(n))

    def _view(self, src, val):
        out = [_expr(d) for d in val.shape]
        queue = []
        for f in (f for d in src for f in d if not _same(f, _ONE)):
            if queue and f.is_Integer and queue[-1].is_Integer:  # static runs regroup freely
                queue[-1] = queue[-1] * f
            else:
                queue.append(f)
        result = []
        for e in out:
            if _same(e, _ONE):
                result.append((_ONE,))
                continue
            taken = []
            product = _ONE
            while not _same(product, e):
                if not queue:
                    raise Unsupported("view of a padded dim")
                f = queue.pop(0)
                need = sympy.simplify(e / product)
                if _same(f, need):
                    taken.append(f)
                    product = product * f
                    continue
                ratio = sympy.simplify(f / need)
                if ratio.is_Integer and int(ratio) > 1:
                    # split f = need * ratio, need the major part: a prefix of f's rows stays one
                    taken.append(need)
                    queue.insert(0, ratio)
                    product = product * need
                    continue
                inverse = sympy.simplify(need / f)
                if f.is_Integer or (inverse.free_symbols or inverse.is_Integer):
                    if not (inverse.is_Integer or inverse.free_symbols):
                        raise Unsupported("view of a padded dim")
                    taken.append(f)
                    product = product * f
                    continue
                raise Unsupported("view of a padded dim")
            merged = []
            for f in taken:  # adjacent constants merge: only symbolic factors need digits
                if merged and f.is_Integer and merged[-1].is_Integer:
                    merged[-1] = merged[-1] * f
                else:
                    merged.append(f)
            result.append(tuple(merged))
        if queue:
            raise Unsupported("view of a padded dim")
        return tuple(result)

    def _slice(self, node, val):
        args = list(node.args) + [None] * (5 - len(node.args))
        src = self._arg_layout(args[0])
        dim = (args[1] or 0) % len(src)
        start = args[2] if args[2] is not None else 0
        step = args[4] if args[4] is not None else 1
        out = _plain_layout(val)
        if not _dim_padded(src[dim]):
            return tuple(src[:dim]) + (out[dim],) + tuple(src[dim + 1:])
        if len(src[dim]) != 1 or step != 1 or not isinstance(start, int) or start < 0:
            raise Unsupported("slice of a padded dim")
        end = args[3]
        if isinstance(end, int) and end < 0:
            raise Unsupported("slice of a padded dim from its end")
        # out[i] = x[start + i]: its real rows are real rows of x (Dynamo guarantees the
        # real end fits; the guards, checked at the buckets, that the padded one does).
        return tuple(src[:dim]) + (out[dim],) + tuple(src[dim + 1:])

    def _cat(self, node, val):
        tensors = [t for t in node.args[0]]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        lays = [self._arg_layout(t) for t in tensors]
        out = _plain_layout(val)
        dim = dim % len(out)
        lays = [lay for lay, t in zip(lays, tensors) if len(lay) == len(out)]  # legacy empty 1-d pieces
        dims = list(out)
        for i in range(len(out)):
            if i == dim:
                continue
            for lay in lays:
                if _dim_padded(lay[i]) or _dim_padded(dims[i]):
                    if dims[i] != lay[i] and _dim_padded(dims[i]) and _dim_padded(lay[i]):
                        raise Unsupported("cat of pieces padded differently")
                    if _dim_padded(lay[i]):
                        dims[i] = lay[i]
        if any(_dim_padded(lay[dim]) for lay in lays):
            if any(len(lay[dim]) != 1 for lay in lays):
                raise Unsupported("cat along a merged padded dim")
            self._mark(node, "cat_real")
        return tuple(dims)

    def _reduction(self, node, target, val):
        src = self._arg_layout(node.args[0])
        n = len(src)
        if target in (aten._softmax.default, aten._log_softmax.default):
            dims = _norm_dims(node.args[1], n)
            keep = True
        elif target in (aten.sum.default, aten.mean.default, aten.prod.default, aten.any.default, aten.all.default):
            dims, keep = list(range(n)), False
        elif target in (aten.argmax.default, aten.argmin.default):
            d = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
            dims = list(range(n)) if d is None else _norm_dims(d, n)
            keep = (node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)) and d is not None
        elif target in (aten.var.correction, aten.var_mean.correction):
            d = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
            dims = _norm_dims(d, n)
            keep = node.kwargs.get("keepdim", False)
        else:
            d = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", [])
            dims = _norm_dims(d, n)
            keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        node.meta["tpu_pad_dims"] = dims
        if any(_dim_padded(src[d]) for d in dims):
            self._mark(node, "reduce")
        if target in (aten._softmax.default, aten._log_softmax.default):
            return src
        if keep:
            out = tuple((_ONE,) if i in dims else src[i] for i in range(n))
        else:
            out = tuple(src[i] for i in range(n) if i not in dims)
        if isinstance(val, (list, tuple)):
            return [out for _ in val]
        return out

    def _matmul(self, node, target, val):
        args = node.args
        if target in (aten.addmm.default, aten.baddbmm.default):
            a, b = self._arg_layout(args[1]), self._arg_layout(args[2])
        else:
            a, b = self._arg_layout(args[0]), self._arg_layout(args[1])
        ka, kb = len(a) - 1, (len(b) - 2 if len(b) > 1 else 0)
        if a[ka] != b[kb] and (_dim_padded(a[ka]) or _dim_padded(b[kb])):
            raise Unsupported(f"{target} contracting dims padded differently")
        if _dim_padded(a[ka]):
            self._mark(node, "matmul")
        if target in (aten.bmm.default, aten.baddbmm.default):
            if a[0] != b[0] and (_dim_padded(a[0]) or _dim_padded(b[0])):
                raise Unsupported(f"{target} batch dims padded differently")
        out_dims = list(a[:-1]) + ([b[-1]] if len(b) > 1 else [])
        if target in (aten.bmm.default, aten.baddbmm.default):
            out_dims = [a[0], a[1], b[2]]
        lay = tuple(out_dims)
        if target in (aten.addmm.default, aten.baddbmm.default):
            bias = self._arg_layout(args[0])
            off = len(lay) - len(bias)
            for i, d in enumerate(bias):
                if _dim_padded(d) and d != lay[i + off]:
                    raise Unsupported(f"{target} bias padded differently")
        return lay


# ---------------------------------------------------------------- running padded


def _fill_value(kind, dtype):
    if kind in ("zero", "mean", "var"):
        return 0
    if kind == "one":
        return 1
    if kind == "false":
        return False
    if kind == "true":
        return True
    if dtype == torch.bool:
        return kind == "max"
    if dtype.is_floating_point:
        return -math.inf if kind == "min" else math.inf
    info = torch.iinfo(dtype)
    return info.min if kind == "min" else info.max


class PaddedInterpreter(torch.fx.Interpreter):
    """Runs a graph on padded tensors, applying the plan's masking actions."""

    def __init__(self, plan, padded, real, values):
        super().__init__(plan.gm, garbage_collect_values=True)
        self.plan = plan
        self.padded = padded  # factor expr -> padded int
        self.real = real      # factor expr -> 0-d int64 tpu tensor (a program input)
        self.values = values  # symbolic value used as a number -> its real value (0-d, a program input)
        self._masks = {}

    def psize(self, f):
        return self.padded[f] if _padded_factor(f) else int(f)

    def dim_mask(self, dim, device):
        """Bool [padded size of dim]: which indices are valid, or None if all are."""
        if not _dim_padded(dim):
            return None
        key = (dim, device)
        if key in self._masks:
            return self._masks[key]
        sizes = [self.psize(f) for f in dim]
        index = torch.arange(math.prod(sizes), device=device)
        mask = None
        stride = math.prod(sizes)
        for f, p in zip(dim, sizes):
            stride //= p
            if not _padded_factor(f):
                continue
            digit = index if len(dim) == 1 else (index // stride) % p
            ok = digit < self.real[f]
            mask = ok if mask is None else mask & ok
        self._masks[key] = mask
        return mask

    def mask(self, layout, dims, device):
        """Bool broadcastable to a value of this layout: valid along `dims`."""
        result = None
        n = len(layout)
        for d in dims:
            m = self.dim_mask(layout[d], device)
            if m is None:
                continue
            shape = [1] * n
            shape[d] = m.shape[0]
            m = m.reshape(shape)
            result = m if result is None else result & m
        return result

    def real_count(self, layout, dims, device):
        count = None
        const = 1
        for d in dims:
            for f in layout[d]:
                if _padded_factor(f):
                    count = self.real[f] if count is None else count * self.real[f]
                else:
                    const *= int(f)
        if count is None:
            return const
        return count * const if const != 1 else count

    def fill(self, x, layout, dims, value):
        m = self.mask(layout, dims, x.device)
        if m is None:
            return x
        return torch.where(m, x, torch.tensor(value, dtype=x.dtype, device=x.device))

    def run_node(self, n):
        action = n.meta.get("tpu_pad_action")
        if n.op == "call_function" and "tpu_value_args" in n.meta:
            return self._with_values(n)
        if n.op != "call_function" or action is None:
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        lay = self.plan.layout
        target = n.target
        if action == "reduce":
            return self._reduce(n, args, kwargs)
        if action == "matmul":
            return self._matmul(n, args, kwargs)
        if action == "mask_scatter_add":
            src = args[3]
            return target(args[0], args[1], args[2], self.fill(src, lay(n.args[3]), range(src.dim()), 0), **kwargs)
        if action == "mask_index_put":
            values = args[2]
            vl = lay(n.args[2])
            values = self.fill(values, vl, range(values.dim()), 0) if vl is not None else values
            return target(args[0], args[1], values, *args[3:], **kwargs)
        if action == "masked_copy":
            dst, src = args[0], args[1]
            m = self.mask(lay(n.args[0]), range(dst.dim()), dst.device)
            src = torch.where(m, src.to(dst.dtype), dst) if m is not None else src
            return target(dst, src, *args[2:], **kwargs)
        if action == "select_real":
            x, dim, index = args[0], args[1] % args[0].dim(), args[2]
            f = lay(n.args[0])[dim][0]
            at = (self.real[f] + index).reshape(1)
            return torch.index_select(x, dim, at).squeeze(dim)
        if action == "cat_real":
            return self._cat(n, args, kwargs)
        raise AssertionError(action)

    def _with_values(self, n):
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        args = list(args)
        if n.target is aten.scalar_tensor.default:
            (_, expr), = n.meta["tpu_value_args"]
            return self.values[expr].to(kwargs.get("dtype") or torch.get_default_dtype())
        like = next((a for a in args if isinstance(a, torch.Tensor)), None)
        for i, expr in n.meta["tpu_value_args"]:
            v = self.values[expr]
            if like is not None:
                if like.is_floating_point() or like.is_complex():
                    v = v.to(like.dtype)
                elif v.is_floating_point():
                    v = v.to(torch.get_default_dtype())
                elif like.dtype != torch.bool and v.dtype != torch.bool:
                    v = v.to(like.dtype)
            args[i] = v
        return _tensor_overload(n.target)(*args, **kwargs)

    def _reduce(self, n, args, kwargs):
        target = n.target
        kind = _REDUCTIONS[target]
        x = args[0]
        layout = self.plan.layout(n.args[0])
        dims = n.meta["tpu_pad_dims"]
        if kind == "mean":
            keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
            dtype = kwargs.get("dtype") or (args[3] if len(args) > 3 else None) or x.dtype
            wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
            total = torch.sum(self.fill(x, layout, dims, 0).to(wide), dims, keepdim=bool(keep))
            return (total / self.real_count(layout, dims, x.device)).to(dtype)
        if kind == "var":
            keep = kwargs.get("keepdim", False)
            correction = kwargs.get("correction")
            correction = 1 if correction is None else correction
            count = self.real_count(layout, dims, x.device)
            mean = torch.sum(self.fill(x, layout, dims, 0), dims, keepdim=True) / count
            dev = self.fill(x - mean, layout, dims, 0)
            dev = dev * dev.conj() if dev.is_complex() else dev * dev
            var = torch.sum(dev, dims, keepdim=bool(keep)) / torch.clamp(count - correction, min=0)
            if target is aten.var_mean.correction:
                return var, mean if keep else mean.squeeze(dims) if dims else mean
            return var
        x = self.fill(x, layout, dims, _fill_value(kind, x.dtype))
        return target(x, *args[1:], **kwargs)

    def _matmul(self, n, args, kwargs):
        target = n.target
        lay = self.plan.layout
        i, j = (1, 2) if target in (aten.addmm.default, aten.baddbmm.default) else (0, 1)
        a, b = args[i], args[j]
        la, lb = lay(n.args[i]), lay(n.args[j])
        a = self.fill(a, la, [a.dim() - 1], 0)
        b = self.fill(b, lb, [b.dim() - 2 if b.dim() > 1 else 0], 0)
        args = list(args)
        args[i], args[j] = a, b
        return target(*args, **kwargs)

    def _cat(self, n, args, kwargs):
        pieces = args[0]
        nodes = n.args[0]
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        lay = self.plan.layout
        keep = [(t, lay(node)) for t, node in zip(pieces, nodes) if lay(node) is not None and
                len(lay(node)) == len(self.plan.layout(n))]
        dim = dim % len(self.plan.layout(n))
        device = keep[0][0].device
        total = sum(t.shape[dim] for t, _ in keep)
        index = torch.arange(total, device=device)
        shape = [1] * keep[0][0].dim()
        shape[dim] = total
        offset = 0
        result = None
        for t, layout in keep:
            size = t.shape[dim]
            if size == 0:
                continue
            local = torch.clamp(index - offset, 0, size - 1) if result is not None else torch.clamp(index, 0, size - 1)
            piece = torch.index_select(t, dim, local)
            if result is None:
                result = piece
            else:
                result = torch.where((index >= offset).reshape(shape), piece, result)
            f = layout[dim][0]
            offset = offset + (self.real[f] if _padded_factor(f) else int(f))
        return result


# ---------------------------------------------------------------- per call


# Per call, every padded layout's sizes are evaluated for the real and the padded
# symbol values: a decode step evaluates ~100. sympy computes free_symbols and
# substitutes anew each time (most of a compiled decode step's host time), so both
# are remembered: an expression's symbols, and its value at given symbol values.
_EXPR_SYMBOLS = {}
_EXPR_VALUES = {}
_EXPR_VALUES_KEPT = 1 << 14  # forgotten all at once past this: lengths that never recur


def eval_expr(e, values):
    symbols = _EXPR_SYMBOLS.get(e)
    if symbols is None:
        symbols = _EXPR_SYMBOLS[e] = tuple(sorted(e.free_symbols, key=str))
    if not symbols:
        return int(e)
    key = (e,) + tuple(values[s] for s in symbols)
    v = _EXPR_VALUES.get(key)
    if v is None:
        if len(_EXPR_VALUES) >= _EXPR_VALUES_KEPT:
            _EXPR_VALUES.clear()
        v = _EXPR_VALUES[key] = int(e.xreplace({s: sympy.Integer(values[s]) for s in symbols}))
    return v


def value_tensor(e, kind, values):
    """The real value of a symbolic number, as a 0-d CPU tensor (uploaded as a program input)."""
    v = e.xreplace({s: sympy.Integer(x) for s, x in values.items()})
    if kind == "float":
        return torch.tensor(float(v), dtype=torch.get_default_dtype())
    if kind == "bool":
        return torch.tensor(bool(v))
    return torch.tensor(int(v), dtype=torch.int64)


def _symbol_sites(gm, plan):
    """Where each call's arguments carry the symbols' values (found once per graph):
    (position, symbol) of the symbolic ints, then (position, rank, ((dim, symbol), ...))
    of the tensors whose dims are symbols, saved inputs excepted (they come padded)."""
    sites = getattr(plan, "symbol_sites", None)
    if sites is None:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        ints, tensors = [], []
        for k, node in enumerate(placeholders):
            v = node.meta.get("val")
            if isinstance(v, torch.SymInt) and _expr(v).is_Symbol:
                ints.append((k, _expr(v)))
            elif _is_tensor_val(v) and node.name not in plan.saved_inputs:
                dims = tuple((d, _expr(size)) for d, size in enumerate(v.shape) if _expr(size).is_Symbol)
                if dims:
                    tensors.append((k, v.dim(), dims))
        sites = plan.symbol_sites = (ints, tensors)
    return sites


def bind_symbols(gm, args, plan):
    """The real value of every symbol, from the call's ints and (unpadded) tensors."""
    values = {}
    ints, tensors = _symbol_sites(gm, plan)
    for k, e in ints:
        if k < len(args) and isinstance(args[k], int):
            values[e] = args[k]
    for k, rank, dims in tensors:
        a = args[k] if k < len(args) else None
        if isinstance(a, torch.Tensor) and a.dim() == rank:
            for d, e in dims:
                if e not in values:
                    values[e] = int(a.shape[d])
    if set(values) != plan.symbols:
        return None
    return values


def choose_buckets(plan, real):
    """Bucket per symbol, or None when the graph's shape guards do not hold there."""
    pol = policy()
    padded = {s: pol.bucket(v) for s, v in real.items()}
    if padded == real:
        return padded
    env = plan.shape_env
    if env is not None:
        key = tuple(sorted((str(s), v) for s, v in padded.items()))
        cache = plan.guard_cache
        if key not in cache:
            cache[key] = _guards_hold(env, plan.symbols, padded)
        if not cache[key]:
            return None
    return padded


def _guards_hold(env, symbols, values):
    subs = {s: sympy.Integer(v) for s, v in values.items()}
    for s, v in values.items():
        r = env.var_to_range.get(s)
        if r is not None:
            try:
                if bool(sympy.Integer(v) > r.upper) or bool(sympy.Integer(v) < r.lower):
                    return False
            except (TypeError, AttributeError):
                pass
    for g in env.guards:
        expr = g.expr
        if not expr.free_symbols or not expr.free_symbols <= symbols:
            continue
        try:
            if not bool(expr.xreplace(subs)):
                return False
        except TypeError:
            return False
    return True


def layout_shape(layout, values):
    return tuple(math.prod(eval_expr(f, values) for f in d) for d in layout)


def unpad(t, layout, real, padded):
    """The real tensor inside a padded one: a view unless a dim merges padded factors."""
    if layout is None or not _layout_padded(layout):
        return t
    if all(len(d) == 1 or not _dim_padded(d) for d in layout):
        for i, d in enumerate(layout):
            r = math.prod(eval_expr(f, real) for f in d)
            if r != t.shape[i]:
                t = t.narrow(i, 0, r)
        return t
    factors = [eval_expr(f, padded) for d in layout for f in d]
    x = t.reshape(factors)
    k = 0
    for d in layout:
        for f in d:
            r = eval_expr(f, real)
            if r != x.shape[k]:
                x = x.narrow(k, 0, r)
            k += 1
    return x.reshape(layout_shape(layout, real))


def pad(t, layout, real, padded):
    """A padded copy of a real tensor (through the host: no per-size device program)."""
    shape = layout_shape(layout, padded)
    if tuple(t.shape) == shape:
        return t
    # A view into a larger storage (an earlier padded output, a KV cache) pads for free:
    # the padding then reads whatever lies there, which the masks make harmless.
    if all(len(d) == 1 or not _dim_padded(d) for d in layout) and t.dim() > 0:
        extent = t.storage_offset() + sum((s - 1) * st for s, st in zip(shape, t.stride())) + 1
        if all(st >= 0 for st in t.stride()) and extent * t.element_size() <= t.untyped_storage().nbytes() \
                and _non_overlapping(shape, t.stride()):
            return t.as_strided(shape, t.stride(), t.storage_offset())
    host = t.detach().cpu()
    factors_real = [eval_expr(f, real) for d in layout for f in d]
    factors_padded = [eval_expr(f, padded) for d in layout for f in d]
    out = torch.zeros(factors_padded, dtype=t.dtype)
    out[tuple(slice(0, r) for r in factors_real)] = host.reshape(factors_real)
    return out.reshape(shape).to(t.device)


def _non_overlapping(shape, strides):
    dims = sorted((st, s) for s, st in zip(shape, strides) if s > 1)
    span = 1
    for st, s in dims:
        if st < span:
            return False
        span = st * s
    return True
