#include "distributed/bindings.h"

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <utility>
#include <vector>

#include "aten/program.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "ir/ops.h"

namespace tpu::distributed {
namespace {

// The collectives, each with what its outputs are, per replica of a group of n,
// for inputs of shape [d0, ...]:
enum class Kind {
  AllReduce,      // in place: the reduction of every input
  AllGather,      // [n * d0, ...]: the inputs in rank order
  ReduceScatter,  // [d0 / n, ...]: part r of the reduction
  AllToAll,       // [d0, ...]: part r of every input, in rank order
  Broadcast,      // in place: the root's input
  Permute,        // [d0, ...]: the input of the rank whose pair targets this one (zeros if none)
};

struct KindName {
  const char* name;
  Kind kind;
};
constexpr KindName kKinds[] = {
    {"all_reduce", Kind::AllReduce}, {"all_gather", Kind::AllGather}, {"reduce_scatter", Kind::ReduceScatter},
    {"all_to_all", Kind::AllToAll},  {"broadcast", Kind::Broadcast},  {"permute", Kind::Permute},
};

Kind kind_named(const std::string& name) {
  for (const auto& k : kKinds)
    if (name == k.name) return k.kind;
  TORCH_CHECK_VALUE(false, "torch_tpu: unknown collective '", name, "'");
}

// How a reduce op (c10d's names) combines values of `dtype`; AVG sums, then divides.
ir::Combiner combiner_for(const std::string& op, ir::DType dtype) {
  const bool pred = dtype == ir::DType::Pred;
  const bool floating = ir::is_floating(dtype) || ir::is_complex(dtype);
  if (op == "sum" || op == "avg") return pred ? ir::Combiner::Or : ir::Combiner::Add;
  if (op == "product") return pred ? ir::Combiner::And : ir::Combiner::Mul;
  if (op == "min") return pred ? ir::Combiner::And : ir::Combiner::Min;
  if (op == "max") return pred ? ir::Combiner::Or : ir::Combiner::Max;
  const ir::Combiner bitwise = op == "band" ? ir::Combiner::And : op == "bor" ? ir::Combiner::Or
                               : op == "bxor" ? ir::Combiner::Xor : ir::Combiner::None;
  TORCH_CHECK_VALUE(bitwise != ir::Combiner::None, "torch_tpu: unknown reduce op '", op, "'");
  TORCH_CHECK(!floating, "torch_tpu: bitwise reduce op ", op, " of a floating tensor (", ir::mlir_name(dtype),
              ") is not supported, as with NCCL");
  return bitwise;
}

// The shape an output of `kind` has for an input of `shape` in a group of n.
ir::Shape output_shape(Kind kind, ir::Shape shape, int64_t n) {
  if (kind == Kind::AllGather) shape[0] *= n;
  if (kind == Kind::ReduceScatter) shape[0] /= n;
  return shape;
}

bool is_bitwise(ir::Combiner c) {
  return c == ir::Combiner::And || c == ir::Combiner::Or || c == ir::Combiner::Xor;
}

// A reduction XLA's collectives need not support (bitwise ops, booleans; XLA:CPU
// and NCCL reduce arithmetic only): every replica's value (all_reduce) or part
// (reduce_scatter: an all_to_all) is brought to each replica, then reduced there.
ir::Value exchange_then_reduce(ir::Graph& g, ir::Value x, bool scatter, ir::Combiner combiner,
                               const ir::ReplicaGroups& groups) {
  const ir::Type& t = g.type(x);
  const int64_t n = static_cast<int64_t>(groups[0].size());
  ir::Shape split{scatter ? n : 1};
  for (size_t d = 0; d < t.shape.size(); ++d) split.push_back(scatter && d == 0 ? t.shape[0] / n : t.shape[d]);
  ir::Value parts = ir::reshape(g, x, split);  // [n, d0 / n, ...] or [1, d0, ...]
  ir::Value all = scatter ? ir::all_to_all(g, parts, 0, 0, groups) : ir::all_gather(g, parts, 0, groups);
  ir::Value zero = ir::constant_int(g, t.dtype, 0);
  ir::Value init = combiner == ir::Combiner::And ? ir::unary(g, ir::Op::Not, zero) : zero;
  return ir::reduce(g, all, init, {0}, combiner);  // [d0 / n, ...] or [d0, ...]
}

// The root replica's `x` on every replica, bit for bit: the root contributes
// its bits as unsigned integers, the others zeros, and their sum is the root's
// (a float sum would turn -0.0 into 0.0). Complex values, which have no integer
// of their width, are gathered and the root's part kept.
ir::Value broadcast_from(ir::Graph& g, ir::Value x, int64_t root, const ir::ReplicaGroups& groups) {
  const ir::Type t = g.type(x);
  if (ir::is_complex(t.dtype)) {
    const int64_t numel = ir::numel(t.shape);
    ir::Value all = ir::all_gather(g, ir::reshape(g, x, {1, numel}), 0, groups);
    return ir::reshape(g, ir::slice(g, all, {root, 0}, {root + 1, numel}), t.shape);
  }
  const bool pred = t.dtype == ir::DType::Pred;
  static constexpr ir::DType kBitsOfWidth[] = {ir::DType::U8, ir::DType::U8, ir::DType::U16, ir::DType::U8,
                                               ir::DType::U32, ir::DType::U8, ir::DType::U8, ir::DType::U8,
                                               ir::DType::U64};
  const ir::DType bits_type = kBitsOfWidth[ir::byte_width(t.dtype)];
  ir::Value bits = pred ? ir::convert(g, x, bits_type) : ir::bitcast_convert(g, x, bits_type, t.shape);
  ir::Value is_root = ir::compare(g, ir::replica_id(g), ir::constant_int(g, ir::DType::U32, root), ir::Compare::EQ);
  ir::Value zeros = ir::broadcast_to(g, ir::constant_int(g, bits_type, 0), t.shape);
  ir::Value mine = ir::select(g, ir::broadcast_to(g, is_root, t.shape), bits, zeros);
  ir::Value sum = ir::all_reduce(g, mine, ir::Combiner::Add, groups);
  return pred ? ir::compare(g, sum, zeros, ir::Compare::NE) : ir::bitcast_convert(g, sum, t.dtype, t.shape);
}

// The replicated program of one collective over the devices `ids` (one group).
ir::Graph collective_graph(Kind kind, const std::string& op, const ir::Type& type, const std::vector<int>& ids,
                           int64_t root, const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  const int64_t n = static_cast<int64_t>(ids.size());
  ir::Graph g;
  g.set_replicas(ids);
  ir::ReplicaGroups groups{ir::Dims{}};
  for (int64_t r = 0; r < n; ++r) groups[0].push_back(r);
  ir::Value x = g.parameter(type);
  ir::Value y;
  switch (kind) {
    case Kind::AllReduce:
    case Kind::ReduceScatter: {
      ir::Combiner combiner = combiner_for(op, type.dtype);
      if (is_bitwise(combiner)) {
        y = exchange_then_reduce(g, x, kind == Kind::ReduceScatter, combiner, groups);
        break;
      }
      y = kind == Kind::AllReduce ? ir::all_reduce(g, x, combiner, groups)
                                  : ir::reduce_scatter(g, x, 0, combiner, groups);
      if (op == "avg" && type.dtype != ir::DType::Pred) {
        // Integers truncate toward zero, as NCCL's average does.
        const bool integral = !ir::is_floating(type.dtype) && !ir::is_complex(type.dtype);
        ir::Value count = integral ? ir::constant_int(g, type.dtype, n)
                                   : ir::constant(g, type.dtype, static_cast<double>(n));
        y = ir::binary(g, ir::Op::Divide, y, ir::broadcast_to(g, count, g.type(y).shape));
      }
      break;
    }
    case Kind::AllGather:
      y = ir::all_gather(g, x, 0, groups);
      break;
    case Kind::AllToAll:
      y = ir::all_to_all(g, x, 0, 0, groups);
      break;
    case Kind::Broadcast:
      y = broadcast_from(g, x, root, groups);
      break;
    case Kind::Permute:
      y = ir::collective_permute(g, x, pairs);
      break;
  }
  g.add_output(y);
  return g;
}

void check_operands(Kind kind, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  const char* what = kKinds[static_cast<int>(kind)].name;
  TORCH_CHECK_VALUE(!inputs.empty(), "torch_tpu.distributed.", what, ": no tensors given");
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "torch_tpu.distributed.", what, ": ", inputs.size(),
                    " inputs but ", outputs.size(), " outputs");
  const int64_t n = static_cast<int64_t>(inputs.size());
  std::vector<bool> used(engine::kMaxDevices, false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (const at::Tensor* t : {&inputs[i], &outputs[i]}) {
      TORCH_CHECK_VALUE(t->defined() && t->is_privateuseone(), "torch_tpu.distributed.", what,
                        ": every tensor must be on a tpu device, got one on ",
                        t->defined() ? t->device().str() : std::string("(undefined)"));
      TORCH_CHECK_VALUE(t->device() == inputs[i].device(), "torch_tpu.distributed.", what, ": input ", i, " is on ",
                        inputs[i].device(), " but its output on ", t->device());
    }
    const int device = inputs[i].device().index();
    TORCH_CHECK_VALUE(!used[device], "torch_tpu.distributed.", what, ": two tensors on ", inputs[i].device(),
                      "; give one tensor per device");
    used[device] = true;
    TORCH_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type() && outputs[i].scalar_type() == inputs[0].scalar_type(),
                "torch_tpu.distributed.", what, ": every tensor must have dtype ", inputs[0].scalar_type(),
                ", got ", inputs[i].scalar_type(), " and ", outputs[i].scalar_type(), " at ", i);
    TORCH_CHECK_VALUE(inputs[i].sizes() == inputs[0].sizes(), "torch_tpu.distributed.", what,
                      ": every input must have the shape ", inputs[0].sizes(), ", input ", i, " has ",
                      inputs[i].sizes());
  }
  const bool split = kind == Kind::ReduceScatter || kind == Kind::AllToAll;
  const bool gathers = kind == Kind::AllGather || split;
  TORCH_CHECK_VALUE(!gathers || inputs[0].dim() > 0, "torch_tpu.distributed.", what,
                    " needs tensors of at least one dimension");
  TORCH_CHECK_VALUE(!split || inputs[0].size(0) % n == 0, "torch_tpu.distributed.", what, ": the first dimension (",
                    inputs[0].size(0), ") must divide by the number of devices (", n, ")");
  ir::Shape expected = output_shape(kind, aten::tensor_type(inputs[0]).shape, n);
  for (size_t i = 0; i < outputs.size(); ++i)
    TORCH_CHECK_VALUE(aten::tensor_type(outputs[i]).shape == expected, "torch_tpu.distributed.", what, ": output ", i,
                      " has shape ", outputs[i].sizes(), ", expected ", c10::IntArrayRef(expected.vec()));
}

void device_collective(const std::string& kind_name, const std::vector<at::Tensor>& inputs,
                       const std::vector<at::Tensor>& outputs, const std::string& op, int64_t root,
                       const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  const Kind kind = kind_named(kind_name);
  check_operands(kind, inputs, outputs);
  const int64_t n = static_cast<int64_t>(inputs.size());
  TORCH_CHECK_VALUE(kind != Kind::Broadcast || (root >= 0 && root < n), "torch_tpu.distributed.broadcast: src ", root,
                    " is not the index of one of the ", n, " tensors");
  for (auto [source, target] : pairs)
    TORCH_CHECK_VALUE(source >= 0 && source < n && target >= 0 && target < n,
                      "torch_tpu.distributed.permute: pair (", source, ", ", target, ") is not of tensor indices 0..",
                      n - 1);
  engine::Runtime& runtime = engine::Runtime::get();
  std::vector<int> ids;
  std::vector<std::vector<engine::BufferRef>> args;
  const ir::Type type = aten::tensor_type(inputs[0]);
  // Each input's value as a buffer of its shape (its view read, any pending
  // work of its device run), one per replica.
  const char* what = kKinds[static_cast<int>(kind)].name;
  for (const at::Tensor& t : inputs) {
    c10::DeviceGuard guard(t.device());
    ids.push_back(runtime.client().devices().at(t.device().index()).id);
    args.push_back({aten::value_buffer(t, what)});
  }
  ir::Graph graph = collective_graph(kind, op, type, ids, root, pairs);
  std::vector<std::vector<engine::BufferRef>> results;
  try {
    results = runtime.execute_replicated(graph, args);
  } catch (const engine::Error& e) {
    aten::raise_device_error(std::string("torch_tpu.distributed.") + what, e,
                             inputs[0].device().index());
  }
  engine::metrics().add("collectives");
  engine::metrics().add("collectives_device_transport");
  const ir::Type result_type{type.dtype, output_shape(kind, type.shape, n)};
  for (size_t i = 0; i < outputs.size(); ++i) {
    c10::DeviceGuard guard(outputs[i].device());
    aten::assign_buffer(outputs[i], std::move(results[i].at(0)), result_type, what);
  }
}

}  // namespace

void bind_device_collectives(pybind11::module_& m) {
  namespace py = pybind11;
  m.def("_device_collective", &device_collective, py::arg("kind"), py::arg("inputs"), py::arg("outputs"),
        py::arg("reduce_op") = "sum", py::arg("root") = 0,
        py::arg("pairs") = std::vector<std::pair<int64_t, int64_t>>{});
}

}  // namespace tpu::distributed
