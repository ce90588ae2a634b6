#include "engine/storage_value.h"

#include <stdexcept>

#include "ir/ops.h"

namespace tpu::engine {

void StorageValue::throw_lost() const {
  throw std::runtime_error("torch_tpu: this tensor has no value: " + *lost +
                           ". Give it a new value (assign or fill it) to use it again.");
}

ir::Value storage_result(ir::Graph& graph, ir::Value flat, const ir::Shape* keep) {
  ir::Value shaped = graph.reshaped_from(flat);
  if (keep != nullptr) {
    const ir::Shape& shape = graph.type(flat).shape;
    // A value of another element type than the old buffer's cannot take its place.
    if (*keep == shape || ir::numel(*keep) != ir::numel(shape)) return flat;
    return ir::reshape(graph, shaped, *keep);
  }
  // Rank 0 and 1 values are as good as flat; keeping them flat keeps [1] storages
  // of scalars, which programs share (scalar_to_device), one shape.
  return graph.type(shaped).rank() >= 2 ? shaped : flat;
}

ir::Value flat_storage_value(ir::Graph& graph, ir::Value parameter) {
  return ir::reshape(graph, parameter, {ir::numel(graph.type(parameter).shape)});
}

}  // namespace tpu::engine
