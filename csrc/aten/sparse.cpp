// Sparse COO and compressed (CSR/CSC/BSR/BSC) tensors on tpu: their indices and
// values are ordinary tpu tensors. Construction, accessors and to_dense run
// here (ATen's device-generic kernels for the metadata, index_put for
// to_dense); every other sparse op runs through the counted CPU fallback.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/index_put.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "aten/fallback.h"

namespace tpu::aten {
namespace {

// A COO tensor's dense form: its values scattered to their indices, duplicates
// (an uncoalesced tensor) summed, as ATen's to_dense does.
at::Tensor coo_to_dense(const at::Tensor& self, std::optional<c10::ScalarType> dtype, std::optional<bool> masked_grad) {
  TORCH_CHECK(!dtype.has_value() || *dtype == self.scalar_type(),
              "dtype argument is not supported by sparse_to_dense");
  if (self.sparse_dim() == 0) return self._values().sum({0}, false, self.scalar_type());  // all entries at one place
  at::Tensor dense = at::zeros(self.sizes(), self.options().layout(c10::kStrided));
  at::Tensor indices = self._indices();
  c10::List<std::optional<at::Tensor>> where;
  for (int64_t d = 0; d < self.sparse_dim(); ++d) where.push_back(indices.select(0, d));
  return dense.index_put_(where, self._values(), /*accumulate=*/true);
}

// Functional ops that ATen would otherwise run as empty() + their out= variant,
// which CPU kernels for sparse layouts do not provide: sent whole to the CPU.
void send_whole_to_cpu(torch::Library& m) {
  for (const char* op : {"sum", "sum.dim_IntList", "addmm", "mm"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&cpu_fallback_for_sparse>());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  send_whole_to_cpu(m);
  m.impl("empty.memory_format", at::native::empty_sparse);
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", at::native::new_with_dims_and_tensor_sparse_symint);
  m.impl("_sparse_coo_tensor_with_dims", at::native::new_with_dims_sparse);
  m.impl("_indices", at::native::_indices_sparse);
  m.impl("_values", at::native::_values_sparse);
  m.impl("indices", at::native::indices_sparse);
  m.impl("values", at::native::values_sparse);
  m.impl("_nnz", at::native::_nnz_sparse);
  m.impl("sparse_dim", at::native::sparse_dim_sparse);
  m.impl("dense_dim", at::native::dense_dim_sparse);
  m.impl("is_coalesced", at::native::is_coalesced_sparse);
  m.impl("_coalesced_", at::native::_coalesced_sparse_);
  m.impl("clone", at::native::clone_sparse);
  m.impl("zero_", at::native::zero_sparse_);
  m.impl("sparse_resize_", at::native::sparse_resize_);
  m.impl("sparse_resize_and_clear_", at::native::sparse_resize_and_clear_);
  m.impl("_to_dense", coo_to_dense);
  m.impl("copy_", at::native::copy_sparse_wrapper_);
  m.impl("copy_sparse_to_sparse_", at::native::copy_sparse_);
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  send_whole_to_cpu(m);
  m.impl("empty.memory_format", at::native::empty_sparse_compressed);
  m.impl("_nnz", at::native::_nnz_sparse_csr);
  m.impl("sparse_dim", at::native::sparse_dim_sparse_csr);
  m.impl("dense_dim", at::native::dense_dim_sparse_csr);
  m.impl("crow_indices", at::native::crow_indices_sparse_csr);
  m.impl("col_indices", at::native::col_indices_sparse_csr);
  m.impl("ccol_indices", at::native::ccol_indices_sparse_csr);
  m.impl("row_indices", at::native::row_indices_sparse_csr);
  m.impl("values", at::native::values_sparse_csr);
  m.impl("clone", at::native::clone_sparse_compressed);
  m.impl("zero_", at::native::zero_sparse_csr_);
  m.impl("copy_", at::native::copy_sparse_compressed_);
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback_for_sparse>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback_for_sparse>());
}

}  // namespace tpu::aten
