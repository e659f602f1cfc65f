#include "rng_snapshot.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <mutex>

namespace fsdp::detail {
namespace {

std::vector<c10::Device> devices_of(const std::vector<at::Tensor>& inputs) {
  std::vector<c10::Device> devices{c10::Device(c10::kCPU)};
  for (const at::Tensor& t : inputs) {
    if (t.defined() && t.is_cuda() && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

at::Tensor state_of(c10::Device device) {
  at::Generator generator = at::globalContext().defaultGenerator(device);  // a handle
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_state(c10::Device device, const at::Tensor& state) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

RngSnapshot RngSnapshot::capture(const std::vector<at::Tensor>& inputs) {
  RngSnapshot snapshot;
  for (c10::Device device : devices_of(inputs)) snapshot.states.emplace_back(device, state_of(device));
  return snapshot;
}

RngFork::RngFork(const RngSnapshot& snapshot) {
  for (const auto& [device, state] : snapshot.states) {
    saved_.states.emplace_back(device, state_of(device));
    set_state(device, state);
  }
}

RngFork::~RngFork() {
  for (const auto& [device, state] : saved_.states) set_state(device, state);
}

}  // namespace fsdp::detail
