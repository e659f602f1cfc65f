#pragma once
// Finds the tensors inside a unit's forward arguments and results, so hooks
// can be attached to them: a Tensor, or tuples, pairs, vectors and optionals
// of them, nested. Other types hold no tensors as far as FSDP is concerned.

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>

#include <tuple>
#include <utility>
#include <vector>

namespace fsdp::detail {

using TensorRefs = c10::SmallVector<at::Tensor*, 4>;

template <class T>
void collect_tensors(TensorRefs& /*out*/, T& /*value*/) {}

inline void collect_tensors(TensorRefs& out, at::Tensor& value) {
  if (value.defined()) out.push_back(&value);
}

template <class T>
void collect_tensors(TensorRefs& out, c10::optional<T>& value) {
  if (value.has_value()) collect_tensors(out, *value);
}

template <class T>
void collect_tensors(TensorRefs& out, std::vector<T>& values) {
  for (auto& v : values) collect_tensors(out, v);
}

template <class A, class B>
void collect_tensors(TensorRefs& out, std::pair<A, B>& value) {
  collect_tensors(out, value.first);
  collect_tensors(out, value.second);
}

template <class... Ts>
void collect_tensors(TensorRefs& out, std::tuple<Ts...>& value) {
  std::apply([&out](auto&... items) { (collect_tensors(out, items), ...); }, value);
}

}  // namespace fsdp::detail
