// Programs from outside torch_tpu: a StableHLO function lowered by JAX, called
// on tpu tensors as one op. Its definitions join the op's program (and, in
// fused mode, the pending graph) as a func.call, so XLA compiles it with the
// ops around it and the compilation cache keys it by content like any program.
#include "aten/external.h"

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

#include <memory>
#include <mutex>
#include <unordered_map>

#include "aten/program.h"

namespace tpu::aten {
namespace {

std::mutex g_callees_mutex;
std::unordered_map<std::string, std::shared_ptr<const ir::Callee>> g_callees;

// The callee named `name`: made from `text` and the outputs' types on first
// use, then shared by every call (its types are fixed by its text).
std::shared_ptr<const ir::Callee> callee_for(const std::string& name, const std::string& text,
                                             const std::vector<at::Tensor>& outputs) {
  std::lock_guard<std::mutex> lock(g_callees_mutex);
  auto& slot = g_callees[name];
  if (!slot) {
    TORCH_CHECK(!text.empty(), "torch_tpu: external function ", name, " called before its definition was given");
    auto callee = std::make_shared<ir::Callee>();
    callee->name = name;
    callee->text = text;
    for (const auto& t : outputs) callee->results.push_back(tensor_type(t));
    slot = std::move(callee);
  }
  return slot;
}

}  // namespace

void call_external(const std::string& name, const std::string& text, const std::vector<at::Tensor>& inputs,
                   const std::vector<at::Tensor>& outputs) {
  TORCH_CHECK(!outputs.empty(), "torch_tpu: external function ", name, " has no results");
  for (const auto& t : outputs)
    TORCH_CHECK(t.is_privateuseone(), "torch_tpu: external function ", name, " writes tpu tensors, got one on ",
                t.device());
  const int device = outputs[0].device().index();
  for (const auto& t : inputs)
    TORCH_CHECK(t.is_privateuseone() && t.device().index() == device, "torch_tpu: external function ", name,
                " takes tensors on ", outputs[0].device(), ", got one on ", t.device());
  auto callee = callee_for(name, text, outputs);
  TORCH_CHECK(callee->results.size() == outputs.size(), "torch_tpu: external function ", name, " has ",
              callee->results.size(), " results, got ", outputs.size(), " outputs");
  for (size_t k = 0; k < outputs.size(); ++k)
    TORCH_CHECK(callee->results[k] == tensor_type(outputs[k]), "torch_tpu: external function ", name, " result ", k,
                " is ", callee->results[k].mlir(), ", the output tensor is ", tensor_type(outputs[k]).mlir());

  c10::DeviceGuard guard(outputs[0].device());
  Program program(name.c_str(), device);
  std::vector<ir::Value> args;
  args.reserve(inputs.size());
  for (const auto& t : inputs) args.push_back(program.read(t));
  std::vector<ir::Value> results = program.graph().add_call(std::move(callee), args);
  for (size_t k = 0; k < outputs.size(); ++k) program.write(outputs[k], results[k]);
  program.run();
}

}  // namespace tpu::aten
