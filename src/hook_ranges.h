#pragma once
// The names of the profiler ranges around a unit's hooks.
//
// [Note: the hooks' profiler ranges]
// Each hook of UnitState (and the root's end-of-backward callback) opens a
// LibTorch RecordFunction range of the USER_SCOPE kind, named as FSDP2 names
// its own (torch/distributed/fsdp/_fully_shard: FSDP::pre_forward, ...), so
// a trace of a LibTorch program shows libfsdp's hooks where a trace of a
// PyTorch one shows FSDP2's, and fsdp::HookTimer can sum them. With no
// callback registered a range costs one check of LibTorch's callback list;
// with a HookTimer alive, `fsdp-bench overhead` prints what timing adds.
// The ranges sit at the entry of the hook methods, so a range covers the
// hook's whole work, including prefetches it issues; the walk over a
// forward's inputs and outputs (fsdp::UnitModule::run_unit) is outside them.

namespace fsdp::detail {

inline constexpr const char* kPreForwardRange = "FSDP::pre_forward";
inline constexpr const char* kPostForwardRange = "FSDP::post_forward";
inline constexpr const char* kPreBackwardRange = "FSDP::pre_backward";
inline constexpr const char* kPostBackwardRange = "FSDP::post_backward";
inline constexpr const char* kRootPostBackwardRange = "FSDP::root_post_backward_callback";

// What a HookTimer counts: every range whose name starts with this.
inline constexpr const char* kHookRangePrefix = "FSDP::";

}  // namespace fsdp::detail
