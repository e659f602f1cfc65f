#pragma once
// Every difference between LibTorch 1.13 (Debian) and LibTorch 2.x (torch
// wheels) that libfsdp depends on lives here, and nowhere else.
//
//   c10d backends: in 1.13, ProcessGroupGloo/NCCL derive from
//     c10d::ProcessGroup; in 2.x they derive from c10d::Backend. Both expose
//     the same virtual collectives we call, so we name the base C10dBackend.
//   storage resizing: done through the StorageImpl's own allocator, which
//     both versions expose (set_data_ptr_noswap + set_nbytes).
//   c10::Allocator: 2.3+ made allocate() non-const and added a pure virtual
//     copy_data(); see FSDP_ALLOCATOR_2_3.
//   at::_foreach_mul_ by a tensor: 2.1+; see FSDP_HAS_FOREACH_MUL_TENSOR.
//   c10d::Store::clone(): pure virtual in recent releases; see
//     [Note: a store that clones itself].
//   TCPStore server: 2.4+ defaults to the libuv server, which builds without
//     libuv (Debian's) refuse; see use_classic_tcpstore_server.
//   fused AdamW: at::_fused_adamw_ has had a CPU kernel, beside the CUDA
//     one, since 2.4; fsdp::FusedAdamW uses it from 2.4 (FSDP_FUSED_ADAMW),
//     so that one build serves both devices.
//   scaled_dot_product_attention: 2.0+. Only the demo GPT in models/ uses
//     it, and models/ sees libfsdp's public headers only, so that one test
//     lives in models/torch_features.h.

#include <c10/core/StorageImpl.h>
#include <c10/util/Logging.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include <sstream>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#if defined(FSDP_WITH_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define FSDP_ALLOCATOR_2_3 1
#else
#define FSDP_ALLOCATOR_2_3 0
#endif

// at::_foreach_mul_(TensorList, const Tensor&): 2.1+ (clip_grad.cpp scales
// every gradient by a device-side coefficient in one multi-tensor kernel).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define FSDP_HAS_FOREACH_MUL_TENSOR 1
#else
#define FSDP_HAS_FOREACH_MUL_TENSOR 0
#endif

// at::_fused_adamw_ on CPU and CUDA: 2.4+ (fsdp::FusedAdamW's step).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define FSDP_FUSED_ADAMW 1
#else
#define FSDP_FUSED_ADAMW 0
#endif

namespace fsdp::compat {

// [Note: a store that clones itself]
// Recent LibTorch made c10d::Store::clone() (a thread-safe copy over the same
// underlying store) pure virtual; 1.13 and 2.6 have none. A store of ours
// derives from CloneableStore<Self>, which overrides clone() where the base
// declares it, calling Self::clone_store(), and adds nothing where it does
// not. Detected, not versioned: the release that added it is not ours to know.
template <class S, class = void>
struct StoreDeclaresClone : std::false_type {};
template <class S>
struct StoreDeclaresClone<S, std::void_t<decltype(std::declval<S&>().clone())>> : std::true_type {};

template <class Self, class Base = c10d::Store, bool = StoreDeclaresClone<Base>::value>
class CloneableStore : public Base {
 public:
  using Base::Base;
};

// The base is a template parameter so that `override` is checked where the
// class is instantiated, not where it is defined: clang checks a class with a
// non-dependent base at once, and finds no clone() to override on 1.13.
template <class Self, class Base>
class CloneableStore<Self, Base, true> : public Base {
 public:
  using Base::Base;
  c10::intrusive_ptr<c10d::Store> clone() override {
    return static_cast<Self*>(this)->clone_store();
  }
};

#if TORCH_VERSION_MAJOR >= 2
using C10dBackend = c10d::Backend;
#else
using C10dBackend = c10d::ProcessGroup;
#endif

// Frees (nbytes == 0) or re-allocates a storage in place. The StorageImpl
// keeps its identity, so every view that autograd saved on it stays valid
// once the storage is refilled. Contents are not preserved.
inline void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  if (storage->nbytes() == nbytes) return;
  if (nbytes == 0) {
    storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  } else {
    storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  }
  storage->set_nbytes(nbytes);
}

// torch::optim keys its per-parameter state by a string of the TensorImpl
// address in 1.13 and by the address itself in later versions.
template <class StateMap>
typename StateMap::key_type optimizer_state_key(const StateMap&, const at::Tensor& param) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same<Key, std::string>::value) {
    // What 1.13's c10::guts::to_string does; that helper is gone in 2.x.
    std::ostringstream key;
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

// [Note: the TCPStore server libfsdp asks for]
// Since 2.4, c10d::TCPStoreOptions has `useLibUV`, true by default, and a
// LibTorch built without libuv (Debian's 2.6) throws "use_libuv was requested
// but PyTorch was build without libuv support" from every TCPStore, server or
// client. Whether libuv is built in is not exported to C++
// (c10d::detail::is_libuv_tcpstore_backend_available has no TORCH_API), so we
// always ask for the classic single-threaded server: the one 1.13 has, built
// into every LibTorch, and ample for a rendezvous of a few keys per rank.
// Detected by the member, not the version, so any build that has the option
// gets it set.
template <class Options, class = void>
struct HasUseLibUV : std::false_type {};
template <class Options>
struct HasUseLibUV<Options, std::void_t<decltype(std::declval<Options&>().useLibUV)>>
    : std::true_type {};

template <class TCPStoreOptions>
void use_classic_tcpstore_server(TCPStoreOptions& options) {
  if constexpr (HasUseLibUV<TCPStoreOptions>::value) options.useLibUV = false;
}

// [Note: no raw LibTorch log line while a store connects]
// c10d logs while a TCPStore connects: a server's failed bind ("[W
// socket.cpp:...] The server socket has failed to bind ... Address already
// in use"), a client's failed attempts. Debian's 1.13 logs through glog,
// which first prints "WARNING: Logging before InitGoogleLogging() is written
// to STDERR"; 2.x logs through c10's own logger. Our error says the same and
// what to do, so while a store connects LibTorch's log threshold is raised to
// FATAL (glog's minloglevel in 1.13, c10's caffe2_log_level in 2.x), and then
// restored. The threshold is global: other threads' warnings in that window
// are dropped too, once per job. Overlapping holders (ranks on threads, in
// tests) share one saved value.
class QuietLibTorchLog {
 public:
  QuietLibTorchLog() {
    std::lock_guard<std::mutex> lock(mu());
    if (holders()++ == 0) {
      saved() = threshold();
      threshold() = 3;  // FATAL, in glog and in c10 alike
    }
  }
  ~QuietLibTorchLog() {
    std::lock_guard<std::mutex> lock(mu());
    if (--holders() == 0) threshold() = saved();
  }
  QuietLibTorchLog(const QuietLibTorchLog&) = delete;
  QuietLibTorchLog& operator=(const QuietLibTorchLog&) = delete;

 private:
  static int& threshold() {
#ifdef C10_USE_GLOG
    return FLAGS_minloglevel;
#else
    return FLAGS_caffe2_log_level;
#endif
  }
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static int& holders() {
    static int n = 0;
    return n;
  }
  static int& saved() {
    static int value = 0;
    return value;
  }
};

#if defined(FSDP_WITH_NCCL)
// LibTorch >= 2.4 warns at exit unless a ProcessGroupNCCL is shut down
// before it is destroyed; 1.13 has no shutdown() and needs none.
inline void shutdown_nccl(c10d::ProcessGroupNCCL& pg) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  pg.shutdown();
#else
  (void)pg;
#endif
}
#endif

}  // namespace fsdp::compat
