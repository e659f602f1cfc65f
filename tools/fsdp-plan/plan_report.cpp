#include "plan_report.h"

#include <fmt/format.h>

#include <cmath>
#include <initializer_list>
#include <utility>

#include "json_text.h"

namespace fsdp_plan {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

namespace {

std::string human_seconds(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

std::string human_rate(double per_s) {
  if (per_s >= 1e6) return fmt::format("{:.2f}M", per_s / 1e6);
  if (per_s >= 1e3) return fmt::format("{:.1f}k", per_s / 1e3);
  return fmt::format("{:.0f}", per_s);
}

}  // namespace

std::string setup_flags(const TrainingSetup& s) {
  std::string flags = fmt::format("--strategy {}", to_string(s.strategy));
  if (s.reshard_group > 1) flags += fmt::format(" --reshard-group {}", s.reshard_group);
  flags += fmt::format(" --activation-checkpointing {}", checkpointing_name(s.checkpoint_every));
  if (s.offload) flags += " --offload";
  if (s.bf16) flags += " --mixed-precision bf16";
  flags += fmt::format(" --micro-batch {} --grad-accum {}", s.micro_batch, s.grad_accum);
  return flags;
}

std::string format_plan(const Plan& p) {
  const MemoryPlan& m = p.memory;
  const TimePlan& t = p.time;
  const TrainingSetup& s = p.setup;
  std::string out = fmt::format(
      "fsdp-plan: {} ({:.3g} parameters) on {} ({} node{} x {} rank{})\n"
      "  {}\n\n",
      p.model->name, static_cast<double>(p.model->numel()), p.profile->name, s.nnodes,
      s.nnodes == 1 ? "" : "s", s.nproc_per_node, s.nproc_per_node == 1 ? "" : "s", setup_flags(s));
  const auto row = [&](const char* what, double bytes, const char* note) {
    out += fmt::format("  {:<24} {:>12}  {}\n", what, human_bytes(bytes), note);
  };
  const char* where = s.offload ? "(host)" : "";
  out += "Memory per rank\n";
  row("sharded parameters", m.sharded_params, where);
  row("sharded gradients", m.sharded_grads, where);
  row("optimizer state", m.optimizer_state, where);
  row("communication buffers", m.comm_buffers, "the rings' receive scratch");
  row("gathered parameters", m.gathered_params, "at most at once, prefetch included");
  row("reduction buffers", m.reduce_buffers, "two units' gradients in flight");
  row("unsharded gradients", m.unsharded_grads, "before their reduction");
  row("activations", m.activations, "kept for backward, one micro-batch");
  row("loss gradients", m.head_transient, "(the loss's backward only)");
  out += fmt::format("  {:<24} {:>12}  {}\n", "", "", "at the peak: " + m.peak_phase);
  row("peak (tensors)", m.device_peak, "");
  row("runtime", p.profile->runtime_bytes, "the process itself (profile)");
  row("allocator", m.device_peak * p.profile->allocator_retention, "kept beyond the tensors (profile)");
  row("peak (resident)", p.profile->resident_bytes(m.device_peak), p.fits ? "fits" : "DOES NOT FIT");
  row("rank memory", p.profile->memory_bytes,
      fmt::format("({:.0f}% headroom kept)", 100 * p.headroom).c_str());
  row("model build", m.build_peak,
      m.deferred_init ? "shards and one module's parameters (deferred)" : "the whole model, then its shards (--deferred-init avoids it)");
  out += fmt::format(
      "\nTime per step\n"
      "  compute                  {:>12}\n"
      "  communication            {:>12}  ({} sent per rank)\n"
      "  exposed communication    {:>12}\n"
      "  synchronization          {:>12}  ({:.0f} ring steps x the profile's cost per step)\n"
      "  offload copies           {:>12}\n"
      "  optimizer                {:>12}\n"
      "  step                     {:>12}\n"
      "  throughput               {:>12}  tokens/s, all ranks\n"
      "  MFU                      {:>11.1f}%\n",
      human_seconds(t.compute_s), human_seconds(t.communication_s), human_bytes(t.bytes_sent),
      human_seconds(t.exposed_comm_s), human_seconds(t.sync_overhead_s), t.ring_steps,
      s.offload ? human_seconds(t.offload_s) : "-",
      human_seconds(t.optimizer_s),
      human_seconds(t.step_s), human_rate(t.tokens_per_s), 100 * t.mfu);
  return out;
}

std::string plan_json(const Plan& p) {
  const MemoryPlan& m = p.memory;
  const TimePlan& t = p.time;
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.SetIndent(' ', 2);
  w.StartObject();
  w.Key("model");
  w.StartObject();
  write_string(w, "name", p.model->name);
  write_number(w, "parameters", static_cast<double>(p.model->numel()));
  write_number(w, "units", static_cast<double>(p.model->units.size()));
  w.EndObject();
  write_string(w, "profile", p.profile->name);
  write_string(w, "setup", setup_flags(p.setup));
  write_number(w, "world_size", p.setup.world_size());
  w.Key("memory");
  w.StartObject();
  write_string(w, "peak_phase", m.peak_phase);
  for (const auto& [name, value] : std::initializer_list<std::pair<const char*, double>>{
           {"sharded_params", m.sharded_params}, {"sharded_grads", m.sharded_grads},
           {"optimizer_state", m.optimizer_state}, {"comm_buffers", m.comm_buffers},
           {"gathered_params", m.gathered_params}, {"reduce_buffers", m.reduce_buffers},
           {"unsharded_grads", m.unsharded_grads}, {"activations", m.activations},
           {"head_transient", m.head_transient}, {"device_peak", m.device_peak},
           {"resident_peak", p.profile->resident_bytes(m.device_peak)}, {"host_bytes", m.host_bytes},
           {"build_peak", m.build_peak}, {"rank_memory", p.profile->memory_bytes}}) {
    write_number(w, name, value);
  }
  w.Key("fits");
  w.Bool(p.fits);
  w.EndObject();
  w.Key("time");
  w.StartObject();
  for (const auto& [name, value] : std::initializer_list<std::pair<const char*, double>>{
           {"compute_s", t.compute_s}, {"communication_s", t.communication_s},
           {"exposed_comm_s", t.exposed_comm_s}, {"sync_overhead_s", t.sync_overhead_s},
           {"ring_steps", t.ring_steps},
           {"offload_s", t.offload_s},
           {"optimizer_s", t.optimizer_s}, {"step_s", t.step_s}, {"tokens_per_s", t.tokens_per_s},
           {"mfu", t.mfu}, {"bytes_sent", t.bytes_sent}}) {
    write_number(w, name, value);
  }
  w.EndObject();
  w.EndObject();
  return buffer.GetString();
}

std::string format_fits(const std::vector<Candidate>& fits, size_t top, const HardwareProfile& hw) {
  if (fits.empty()) {
    return fmt::format(
        "No setting fits in {} per rank. Add ranks (--nnodes, --nproc-per-node), or shrink the "
        "model or the batch.\n",
        human_bytes(hw.memory_bytes));
  }
  std::string out = fmt::format("{:>3}  {:<13} {:>5}  {:<8} {:<7} {:>5} {:>5}  {:>11}  {:>10}  {:>10}  {:>5}\n",
                                "#", "strategy", "group", "ckpt", "offload", "micro", "accum",
                                "peak/rank", "step", "tokens/s", "MFU");
  for (size_t i = 0; i < fits.size() && i < top; ++i) {
    const Candidate& c = fits[i];
    const TrainingSetup& s = c.setup;
    out += fmt::format("{:>3}  {:<13} {:>5}  {:<8} {:<7} {:>5} {:>5}  {:>11}  {:>10}  {:>10}  {:>4.1f}%\n",
                       i + 1, to_string(s.strategy), s.reshard_group > 1 ? std::to_string(s.reshard_group) : "-",
                       checkpointing_name(s.checkpoint_every), s.offload ? "yes" : "no", s.micro_batch,
                       s.grad_accum, human_bytes(hw.resident_bytes(c.memory.device_peak)),
                       human_seconds(c.time.step_s), human_rate(c.time.tokens_per_s), 100 * c.time.mfu);
  }
  if (fits.size() > top) out += fmt::format("({} more fit; --top N shows them)\n", fits.size() - top);
  return out;
}

std::string fits_json(const std::vector<Candidate>& fits, size_t top) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.SetIndent(' ', 2);
  w.StartArray();
  for (size_t i = 0; i < fits.size() && i < top; ++i) {
    const Candidate& c = fits[i];
    w.StartObject();
    write_string(w, "setup", setup_flags(c.setup));
    write_number(w, "device_peak", c.memory.device_peak);
    write_number(w, "step_s", c.time.step_s);
    write_number(w, "tokens_per_s", c.time.tokens_per_s);
    write_number(w, "mfu", c.time.mfu);
    w.EndObject();
  }
  w.EndArray();
  return buffer.GetString();
}

}  // namespace fsdp_plan
