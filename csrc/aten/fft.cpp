// The FFT family's ATen primitives (_fft_c2c, _fft_r2c, _fft_c2r): every
// torch.fft function and stft decompose into them. The math is in
// lowering/fft.*; here are ATen's dtype checks, output shapes and out= forms.
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>

#include <ATen/ops/empty.h>

#include "aten/op_helpers.h"
#include "ir/ops.h"
#include "lowering/fft.h"
#include "lowering/types.h"

namespace tpu::aten {
namespace {

std::vector<int64_t> fft_dims(const char* op, const at::Tensor& self, c10::IntArrayRef dim) {
  TORCH_CHECK(!dim.empty(), op, ": expected at least one dimension to transform");
  std::vector<int64_t> dims;
  for (int64_t d : dim) dims.push_back(at::maybe_wrap_dim(d, self.dim()));
  std::vector<int64_t> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  TORCH_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), op, ": dims must be unique");
  return dims;
}

lowering::FftNorm norm_of(int64_t normalization) {
  TORCH_CHECK(normalization >= 0 && normalization <= 2, "Invalid normalization mode: ", normalization);
  return static_cast<lowering::FftNorm>(normalization);
}

void check_floating(const char* op, const at::Tensor& self, bool complex) {
  c10::ScalarType t = self.scalar_type();
  bool ok = complex ? (t == c10::kComplexFloat || t == c10::kComplexDouble) : (t == c10::kFloat || t == c10::kDouble);
  TORCH_CHECK(ok, op, ": expected a ", complex ? "complex64 or complex128" : "float32 or float64",
              " input on tpu, got ", c10::toString(t));
}

// Runs `build` on self's value into o.out (when given) or a fresh tensor.
template <typename Build>
at::Tensor run_fft(Overload o, const at::Tensor& self, c10::IntArrayRef shape, c10::ScalarType dtype, Build build) {
  const std::string name = variant(o);
  c10::DeviceGuard guard(self.device());
  at::Tensor result = prepare_output(name.c_str(), o.out, shape, dtype, self.device(), false);
  TORCH_CHECK(o.out == nullptr || o.out->scalar_type() == dtype, name, ": expected out dtype ", dtype, " but got ",
              o.out->scalar_type());
  Program p(name.c_str(), self.device());
  p.write(result, build(p.graph(), p.read(self)));
  p.run();
  return result;
}

at::Tensor c2c(Overload o, const at::Tensor& self, c10::SymIntArrayRef dim_sym, int64_t normalization, bool forward) {
  check_floating("_fft_c2c", self, true);
  std::vector<int64_t> dims = fft_dims(o.name, self, C10_AS_INTARRAYREF_SLOW(dim_sym));
  auto norm = norm_of(normalization);
  return run_fft(o, self, self.sizes(), self.scalar_type(), [&](ir::Graph& g, ir::Value x) {
    return lowering::fft_c2c(g, x, dims, norm, forward);
  });
}

at::Tensor r2c(Overload o, const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, bool onesided) {
  check_floating("_fft_r2c", self, false);
  std::vector<int64_t> dims = fft_dims(o.name, self, dim);
  auto norm = norm_of(normalization);
  std::vector<int64_t> shape = self.sizes().vec();
  if (onesided) shape[dims.back()] = shape[dims.back()] / 2 + 1;
  return run_fft(o, self, shape, c10::toComplexType(self.scalar_type()), [&](ir::Graph& g, ir::Value x) {
    return lowering::fft_r2c(g, x, dims, norm, onesided);
  });
}

at::Tensor c2r(Overload o, const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization,
               c10::SymInt last_sym) {
  check_floating("_fft_c2r", self, true);
  std::vector<int64_t> dims = fft_dims(o.name, self, dim);
  int64_t last_dim_size = last_sym.expect_int();
  TORCH_CHECK(last_dim_size >= 1, "Invalid number of data points (", last_dim_size, ") specified");
  auto norm = norm_of(normalization);
  std::vector<int64_t> shape = self.sizes().vec();
  shape[dims.back()] = last_dim_size;
  return run_fft(o, self, shape, c10::toRealValueType(self.scalar_type()), [&](ir::Graph& g, ir::Value x) {
    return lowering::fft_c2r(g, x, dims, norm, last_dim_size);
  });
}

// The gradient of x.unfold(dim, size, step) (stft frames its signal with
// unfold): every window element adds into the input position it came from.
at::Tensor unfold_backward(const at::Tensor& grad_in, c10::SymIntArrayRef input_sizes_sym, int64_t dim,
                           int64_t size, int64_t step) {
  std::vector<int64_t> input_sizes = C10_AS_INTARRAYREF_SLOW(input_sizes_sym).vec();
  if (input_sizes.empty()) {  // a 0-dim input unfolds to [size] with size <= 1: its one window
    c10::DeviceGuard guard(grad_in.device());
    at::Tensor result = at::empty({}, grad_in.options());
    Program p("unfold_backward", grad_in.device());
    ir::DType dtype = lowering::to_ir(grad_in.scalar_type());
    p.write(result, grad_in.numel() == 0 ? ir::full(p.graph(), dtype, 0, {})
                                         : ir::reshape(p.graph(), p.read(grad_in), {}));
    p.run();
    return result;
  }
  int64_t rank = static_cast<int64_t>(input_sizes.size());
  dim = at::maybe_wrap_dim(dim, rank);
  c10::DeviceGuard guard(grad_in.device());
  at::Tensor result = at::empty(input_sizes, grad_in.options());
  Program p("unfold_backward", grad_in.device());
  ir::Graph& g = p.graph();
  if (result.numel() == 0) return result;
  int64_t windows = grad_in.size(dim);
  ir::Value grad = p.read(grad_in);
  // [windows, size, other dims...] -> rows (window, offset) of the other dims.
  ir::Dims perm{dim, rank}, others;
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim) perm.push_back(d), others.push_back(input_sizes[d]);
  ir::Shape rows{windows * size};
  rows.insert(rows.end(), others.begin(), others.end());
  ir::Value updates = ir::reshape(g, ir::transpose(g, grad, perm), rows);
  ir::Shape grid{windows, size};
  ir::Value start = ir::binary(g, ir::Op::Multiply, ir::iota(g, ir::DType::S64, grid, 0),
                               ir::full(g, ir::DType::S64, static_cast<double>(step), grid));
  ir::Value index = ir::reshape(g, ir::binary(g, ir::Op::Add, start, ir::iota(g, ir::DType::S64, grid, 1)),
                                {windows * size});
  ir::Shape target{input_sizes[dim]};
  target.insert(target.end(), others.begin(), others.end());
  ir::DType dtype = g.type(grad).dtype;
  ir::Value summed = ir::scatter_rows(g, ir::full(g, dtype, 0, target), index, updates, ir::Combiner::Add);
  // Back to the input's dim order: dim sits first.
  ir::Dims back(rank);
  for (int64_t d = 0, k = 1; d < rank; ++d) back[d] = d == dim ? 0 : k++;
  p.write(result, ir::transpose(g, summed, back));
  p.run();
  return result;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  impl_variants<c2c, "_fft_c2c">(m, kFunctionalAndOut);
  impl_variants<r2c, "_fft_r2c">(m, kFunctionalAndOut);
  impl_variants<c2r, "_fft_c2r">(m, kFunctionalAndOut);
  m.impl("unfold_backward", unfold_backward);
}

}  // namespace tpu::aten
