#include "grad_reduction_queue.h"

#include "flat_param_grads.h"

namespace fsdp::detail {

void GradReductionQueue::issue(FlatParamGrads& grads) {
  grads.reduce_grads_async();
  const int64_t bytes = grads.reduce_buffer_bytes();
  bytes_.add(bytes);
  in_flight_.emplace_back(&grads, bytes);
  while (in_flight_.size() > kInFlight) finish_oldest();
}

void GradReductionQueue::finish_all() {
  while (!in_flight_.empty()) finish_oldest();
}

void GradReductionQueue::forget() {
  for (const auto& [grads, bytes] : in_flight_) bytes_.sub(bytes);
  in_flight_.clear();
}

void GradReductionQueue::finish_oldest() {
  auto [grads, bytes] = in_flight_.front();
  in_flight_.pop_front();
  grads->finish_reduction();
  bytes_.sub(bytes);
}

}  // namespace fsdp::detail
