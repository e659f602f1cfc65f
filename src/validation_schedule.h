#pragma once
// Which steps of one fully_shard() model run the checks that cost
// communication or a host synchronization, decided in one place: the first
// steps always, every step when asked (FSDP_DEBUG=1 at fully_shard time, or
// UnitModule::set_validate_execution_order).

#include <cstdint>

namespace fsdp::detail {

class ValidationSchedule {
 public:
  explicit ValidationSchedule(bool every_step) : every_step_(every_step) {}

  void set_every_step(bool on) { every_step_ = on; }
  // This root forward all-gathers each unit's index before its gather: the
  // first one, or every one. See [Note: execution order validation].
  bool checks_order() const { return every_step_ || forwards_done_ == 0; }
  // This step compares whole-shard sums, not a sample, between forward and
  // backward: the first two steps, or every one. See [Note: optimizer step
  // before backward].
  bool checks_whole_shards() const { return every_step_ || backwards_done_ < 2; }

  void root_forward_done() { ++forwards_done_; }
  void backward_done() { ++backwards_done_; }

 private:
  bool every_step_;
  int64_t forwards_done_ = 0;
  int64_t backwards_done_ = 0;
};

}  // namespace fsdp::detail
