#include "fsdp/module_wrapper.h"

#include <c10/util/Exception.h>

namespace fsdp {

ModuleWrapper::ModuleWrapper(const std::string& kind, std::shared_ptr<torch::nn::Module> inner)
    : torch::nn::Module(kind), inner_(std::move(inner)), kind_(kind) {
  TORCH_CHECK(inner_, kind_, " needs a module to wrap, got an empty holder");
  // Mirror the wrapped module's direct members under their own names, so
  // named_parameters() of any enclosing module is unchanged by the wrapper.
  for (const auto& child : inner_->named_children()) register_module(child.key(), child.value());
  for (const auto& param : inner_->named_parameters(/*recurse=*/false)) {
    register_parameter(param.key(), param.value(), param.value().requires_grad());
  }
  for (const auto& buffer : inner_->named_buffers(/*recurse=*/false)) {
    register_buffer(buffer.key(), buffer.value());
  }
}

bool ModuleWrapper::has_trainable_params() const {
  for (const auto& p : inner_->parameters()) {
    if (p.requires_grad()) return true;
  }
  return false;
}

void ModuleWrapper::train(bool on) {
  torch::nn::Module::train(on);
  inner_->train(on);  // the wrapped module is not a child; keep its flag in step
}

void ModuleWrapper::pretty_print(std::ostream& stream) const {
  stream << kind_ << "(";
  inner_->pretty_print(stream);
  stream << ")";
}

}  // namespace fsdp
