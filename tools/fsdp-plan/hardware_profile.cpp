#include "hardware_profile.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "json_text.h"

namespace fsdp_plan {
namespace {

constexpr double kGB = 1e9;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kTera = 1e12;

// [Note: the shipped profiles' figures]
// Datasheet figures, dense (no sparsity):
//  - H100 SXM5 80GB: 989.4 TFLOPS bf16, 67 TFLOPS fp32, 80 GB HBM3 at 3.35
//    TB/s; NVLink 4
//    at 900 GB/s per GPU both ways (450 GB/s each way); DGX H100 has one
//    ConnectX-7 400 Gb/s InfiniBand NIC per GPU (50 GB/s). NVIDIA H100
//    datasheet; NVIDIA DGX BasePOD reference architecture, "Core Components".
//  - A100 SXM4 80GB: 312 TFLOPS bf16, 19.5 TFLOPS fp32, 80 GB HBM2e at 2.039
//    TB/s; NVLink 3
//    at 600 GB/s both ways (300 each way); DGX A100 has one ConnectX-6 200
//    Gb/s HDR NIC per GPU (25 GB/s). NVIDIA A100 datasheet; NVIDIA blog
//    "Introducing NVIDIA HGX A100"; DGX A100 specifications.
// Assumptions, not datasheet figures, and labelled so in `fsdp-plan
// profiles`: 50% of peak matmul throughput achieved in training (typical
// large-model MFU is 35-55%); bandwidths at 80% of the link's (measured
// NVLink runs reach ~83%, nccl/issues/1264); per-step latency from NCCL's
// ring model (src/graph/tuning.cc: ~3.4 us per NVLink step, ~9.6 us per
// network step, Simple protocol); 2 GiB of CUDA context and workspace, and
// 10% of the tensors held by the caching allocator beyond them; for
// offload, PCIe Gen5 x16 (H100; 64 GB/s each way) or Gen4 (A100; 32 GB/s),
// and a rank's eighth of two sockets of 8-channel DDR (H100: DDR5-4800, 307
// GB/s a socket; A100: DDR4-3200, 205 GB/s a socket).
struct GpuFigures {
  double bf16_tflops, fp32_tflops, hbm_tbs, nvlink_gbs, nic_gbs, pcie_gbs, socket_gbs;
};

HardwareProfile gpu_profile(std::string name, const GpuFigures& f, std::string source) {
  HardwareProfile p;
  p.name = std::move(name);
  p.source = std::move(source);
  p.peak_flops_bf16 = f.bf16_tflops * kTera;
  p.peak_flops_fp32 = f.fp32_tflops * kTera;
  p.achieved_fraction = p.bf16_achieved_fraction = 0.5;
  p.memory_bytes_per_s = f.hbm_tbs * kTera;
  p.host_link_bytes_per_s = f.pcie_gbs * kGB;
  p.host_memory_bytes_per_s = 2 * f.socket_gbs * kGB / 8;
  p.memory_bytes = 80 * kGB;
  p.host_memory_bytes = 2048 * kGB;
  p.runtime_bytes = 2 * kGiB;
  p.allocator_retention = 0.1;
  p.ranks_per_node = 8;
  p.intra_node = Link{3.4e-6, 0.8 * f.nvlink_gbs * kGB};
  p.inter_node = Link{9.6e-6, 0.8 * f.nic_gbs * kGB};
  return p;
}

constexpr const char* kProfileFields =
    "a profile has name, peak_flops_fp32, peak_flops_bf16, memory_bytes, memory_bytes_per_s, "
    "ranks_per_node, intra_node and inter_node {latency_s, bytes_per_s}; `fsdp-plan calibrate "
    "--output FILE` writes one";

HardwareProfile from_json(const rapidjson::Value& j, const std::string& path) {
  const std::string where = fmt::format("profile '{}' ({})", path, kProfileFields);
  if (!j.IsObject()) throw std::runtime_error(where + ": not a JSON object");
  HardwareProfile p;
  p.name = string_or(j, "name", "", where);
  if (p.name.empty()) throw std::runtime_error(where + ": \"name\" is missing");
  p.source = string_or(j, "source", path, where);
  p.peak_flops_fp32 = number_at(j, "peak_flops_fp32", where);
  p.peak_flops_bf16 = number_at(j, "peak_flops_bf16", where);
  p.achieved_fraction = number_or(j, "achieved_fraction", 1.0, where);
  p.memory_bytes = number_at(j, "memory_bytes", where);
  p.memory_bytes_per_s = number_at(j, "memory_bytes_per_s", where);
  p.runtime_bytes = number_or(j, "runtime_bytes", 0.0, where);
  p.allocator_retention = number_or(j, "allocator_retention", 0.0, where);
  p.unit_overhead_s = number_or(j, "unit_overhead_s", 0.0, where);
  p.bf16_achieved_fraction = number_or(j, "bf16_achieved_fraction", p.achieved_fraction, where);
  p.bf16_unit_overhead_s = number_or(j, "bf16_unit_overhead_s", p.unit_overhead_s, where);
  p.host_memory_bytes = number_or(j, "host_memory_bytes", p.memory_bytes, where);
  p.host_link_bytes_per_s = number_or(j, "host_link_bytes_per_s", p.memory_bytes_per_s, where);
  p.host_memory_bytes_per_s = number_or(j, "host_memory_bytes_per_s", p.memory_bytes_per_s, where);
  p.ranks_per_node = static_cast<int>(number_at(j, "ranks_per_node", where));
  const auto link = [&](const char* key) {
    if (!j.HasMember(key) || !j[key].IsObject()) {
      throw std::runtime_error(fmt::format("{}: \"{}\" is missing", where, key));
    }
    return Link{number_at(j[key], "latency_s", where), number_at(j[key], "bytes_per_s", where)};
  };
  p.intra_node = link("intra_node");
  p.inter_node = link("inter_node");
  p.comm_compute_overlap = number_or(j, "comm_compute_overlap", 1.0, where);
  if (p.comm_compute_overlap < 0 || p.comm_compute_overlap > 1) {
    throw std::runtime_error(fmt::format("profile '{}': comm_compute_overlap is {}; it is a "
                                         "fraction from 0 to 1", path, p.comm_compute_overlap));
  }
  p.sync_per_ring_step_s = number_or(j, "sync_per_ring_step_s", 0.0, where);
  p.bf16_sync_per_ring_step_s =
      number_or(j, "bf16_sync_per_ring_step_s", p.sync_per_ring_step_s, where);
  for (const auto& [key, value] : {std::pair{"sync_per_ring_step_s", p.sync_per_ring_step_s},
                                   std::pair{"bf16_sync_per_ring_step_s", p.bf16_sync_per_ring_step_s}}) {
    if (value < 0) {
      throw std::runtime_error(fmt::format("profile '{}': {} is {}; it is a time in seconds, 0 or "
                                           "more", path, key, value));
    }
  }
  if (p.peak_flops_fp32 <= 0 || p.memory_bytes <= 0 || p.memory_bytes_per_s <= 0 ||
      p.intra_node.bytes_per_s <= 0 || p.inter_node.bytes_per_s <= 0 || p.ranks_per_node < 1) {
    throw std::runtime_error(fmt::format(
        "profile '{}': flops, memory and bandwidths must be positive and ranks_per_node at least 1",
        path));
  }
  return p;
}

void write_link(JsonWriter& w, const char* name, const Link& link) {
  w.Key(name);
  w.StartObject();
  write_number(w, "latency_s", link.latency_s);
  write_number(w, "bytes_per_s", link.bytes_per_s);
  w.EndObject();
}

}  // namespace

const std::vector<HardwareProfile>& shipped_profiles() {
  static const std::vector<HardwareProfile> profiles = {
      gpu_profile("h100-sxm", {989.4, 67, 3.35, 450, 50, 64, 307},
                  "NVIDIA H100 SXM5 datasheet; DGX H100 (8x ConnectX-7 400 Gb/s); assumptions in "
                  "[Note: the shipped profiles' figures]"),
      gpu_profile("a100-sxm", {312, 19.5, 2.039, 300, 25, 32, 205},
                  "NVIDIA A100 SXM4 80GB datasheet; DGX A100 (8x ConnectX-6 200 Gb/s HDR); "
                  "assumptions in [Note: the shipped profiles' figures]"),
  };
  return profiles;
}

HardwareProfile load_profile(const std::string& name_or_path) {
  std::string names;
  for (const auto& p : shipped_profiles()) {
    if (p.name == name_or_path) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  std::ifstream in(name_or_path);
  if (!in) {
    throw std::runtime_error(fmt::format(
        "--profile '{}' is neither a shipped profile ({}) nor a readable file; run `fsdp-plan "
        "calibrate --output {}` to measure this machine",
        name_or_path, names, name_or_path));
  }
  std::stringstream text;
  text << in.rdbuf();
  const rapidjson::Document j = parse_json(text.str(), fmt::format("profile '{}'", name_or_path));
  return from_json(j, name_or_path);
}

std::string profile_to_json(const HardwareProfile& p) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.SetIndent(' ', 2);
  w.StartObject();
  write_string(w, "name", p.name);
  write_string(w, "source", p.source);
  write_number(w, "peak_flops_fp32", p.peak_flops_fp32);
  write_number(w, "peak_flops_bf16", p.peak_flops_bf16);
  write_number(w, "achieved_fraction", p.achieved_fraction);
  write_number(w, "memory_bytes", p.memory_bytes);
  write_number(w, "memory_bytes_per_s", p.memory_bytes_per_s);
  write_number(w, "host_memory_bytes", p.host_memory_bytes);
  write_number(w, "host_link_bytes_per_s", p.host_link_bytes_per_s);
  write_number(w, "host_memory_bytes_per_s", p.host_memory_bytes_per_s);
  write_number(w, "runtime_bytes", p.runtime_bytes);
  write_number(w, "allocator_retention", p.allocator_retention);
  write_number(w, "unit_overhead_s", p.unit_overhead_s);
  write_number(w, "bf16_achieved_fraction", p.bf16_achieved_fraction);
  write_number(w, "bf16_unit_overhead_s", p.bf16_unit_overhead_s);
  w.Key("ranks_per_node");
  w.Int(p.ranks_per_node);
  write_link(w, "intra_node", p.intra_node);
  write_link(w, "inter_node", p.inter_node);
  write_number(w, "comm_compute_overlap", p.comm_compute_overlap);
  write_number(w, "sync_per_ring_step_s", p.sync_per_ring_step_s);
  write_number(w, "bf16_sync_per_ring_step_s", p.bf16_sync_per_ring_step_s);
  w.EndObject();
  return buffer.GetString();
}

void save_profile(const HardwareProfile& profile, const std::string& path) {
  std::ofstream out(path);
  out << profile_to_json(profile) << '\n';
  if (!out.flush()) throw std::runtime_error(fmt::format("cannot write profile '{}'", path));
}

}  // namespace fsdp_plan
