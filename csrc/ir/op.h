// The op vocabulary of the IR: one enumerator per StableHLO/CHLO operation a
// graph node can be, with its MLIR name in one table. Nodes carry the enumerator,
// so building, hashing and comparing a graph touches no strings.
#pragma once

#include <cstdint>

namespace tpu::ir {

// X(enumerator, MLIR name)
#define TPU_IR_OPS(X) \
  X(Abs, "stablehlo.abs") \
  X(Add, "stablehlo.add") \
  X(And, "stablehlo.and") \
  X(Atan2, "stablehlo.atan2") \
  X(BitcastConvert, "stablehlo.bitcast_convert") \
  X(BroadcastInDim, "stablehlo.broadcast_in_dim") \
  X(Ceil, "stablehlo.ceil") \
  X(Compare, "stablehlo.compare") \
  X(Complex, "stablehlo.complex") \
  X(Concatenate, "stablehlo.concatenate") \
  X(Constant, "stablehlo.constant") \
  X(Convert, "stablehlo.convert") \
  X(Convolution, "stablehlo.convolution") \
  X(Cosine, "stablehlo.cosine") \
  X(CountLeadingZeros, "stablehlo.count_leading_zeros") \
  X(Divide, "stablehlo.divide") \
  X(DotGeneral, "stablehlo.dot_general") \
  X(DynamicSlice, "stablehlo.dynamic_slice") \
  X(DynamicUpdateSlice, "stablehlo.dynamic_update_slice") \
  X(Exponential, "stablehlo.exponential") \
  X(ExponentialMinusOne, "stablehlo.exponential_minus_one") \
  X(Fft, "stablehlo.fft") \
  X(Floor, "stablehlo.floor") \
  X(Gather, "stablehlo.gather") \
  X(Imag, "stablehlo.imag") \
  X(Iota, "stablehlo.iota") \
  X(IsFinite, "stablehlo.is_finite") \
  X(Log, "stablehlo.log") \
  X(LogPlusOne, "stablehlo.log_plus_one") \
  X(Logistic, "stablehlo.logistic") \
  X(Maximum, "stablehlo.maximum") \
  X(Minimum, "stablehlo.minimum") \
  X(Multiply, "stablehlo.multiply") \
  X(Negate, "stablehlo.negate") \
  X(Not, "stablehlo.not") \
  X(Or, "stablehlo.or") \
  X(Pad, "stablehlo.pad") \
  X(Power, "stablehlo.power") \
  X(Real, "stablehlo.real") \
  X(Reduce, "stablehlo.reduce") \
  X(ReduceWindow, "stablehlo.reduce_window") \
  X(Remainder, "stablehlo.remainder") \
  X(Reshape, "stablehlo.reshape") \
  X(Reverse, "stablehlo.reverse") \
  X(RoundNearestEven, "stablehlo.round_nearest_even") \
  X(Rsqrt, "stablehlo.rsqrt") \
  X(Scatter, "stablehlo.scatter") \
  X(Select, "stablehlo.select") \
  X(ShiftLeft, "stablehlo.shift_left") \
  X(ShiftRightArithmetic, "stablehlo.shift_right_arithmetic") \
  X(ShiftRightLogical, "stablehlo.shift_right_logical") \
  X(Sign, "stablehlo.sign") \
  X(Sine, "stablehlo.sine") \
  X(Slice, "stablehlo.slice") \
  X(Sort, "stablehlo.sort") \
  X(Sqrt, "stablehlo.sqrt") \
  X(Subtract, "stablehlo.subtract") \
  X(Tan, "stablehlo.tan") \
  X(Tanh, "stablehlo.tanh") \
  X(Transpose, "stablehlo.transpose") \
  X(TriangularSolve, "stablehlo.triangular_solve") \
  X(While, "stablehlo.while") \
  X(Xor, "stablehlo.xor") \
  X(Acos, "chlo.acos") \
  X(Acosh, "chlo.acosh") \
  X(Asin, "chlo.asin") \
  X(Asinh, "chlo.asinh") \
  X(Atan, "chlo.atan") \
  X(Atanh, "chlo.atanh") \
  X(Cosh, "chlo.cosh") \
  X(Erf, "chlo.erf") \
  X(ErfInv, "chlo.erf_inv") \
  X(Erfc, "chlo.erfc") \
  X(Lgamma, "chlo.lgamma") \
  X(Sinh, "chlo.sinh") \
  X(Call, "func.call") \
  X(AllGather, "stablehlo.all_gather") \
  X(AllReduce, "stablehlo.all_reduce") \
  X(AllToAll, "stablehlo.all_to_all") \
  X(CollectivePermute, "stablehlo.collective_permute") \
  X(ReduceScatter, "stablehlo.reduce_scatter") \
  X(ReplicaId, "stablehlo.replica_id")

enum class Op : uint8_t {
  Parameter,  // a graph's input
  Result,     // the k-th result of a multi-result node (a while loop, a call); emits no line
#define TPU_IR_OP_ENUMERATOR(name, mlir) name,
  TPU_IR_OPS(TPU_IR_OP_ENUMERATOR)
#undef TPU_IR_OP_ENUMERATOR
};

// ir::Op::Add; "parameter" and "result" for the two structural kinds.
const char* mlir_name(Op op);
// The name without its dialect: "add", "erf", "call".
const char* short_name(Op op);

}  // namespace tpu::ir
