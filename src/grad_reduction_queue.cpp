#include "grad_reduction_queue.h"

#include "unit_state.h"

namespace fsdp::detail {

void GradReductionQueue::issued(UnitState& unit) {
  const int64_t bytes = unit.params().reduce_buffer_bytes();
  bytes_.add(bytes);
  in_flight_.emplace_back(&unit, bytes);
  while (in_flight_.size() > kInFlight) finish_oldest();
}

void GradReductionQueue::finish_all() {
  while (!in_flight_.empty()) finish_oldest();
}

void GradReductionQueue::forget() {
  for (const auto& [unit, bytes] : in_flight_) bytes_.sub(bytes);
  in_flight_.clear();
}

void GradReductionQueue::finish_oldest() {
  auto [unit, bytes] = in_flight_.front();
  in_flight_.pop_front();
  unit->params().finish_grad_reduction();
  bytes_.sub(bytes);
}

}  // namespace fsdp::detail
