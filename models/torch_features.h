#pragma once
// The LibTorch features the demo models use where LibTorch has them.
// libfsdp keeps its version tests in src/compat.h; models/ sees only
// libfsdp's public headers, so its one test lives here, on the same macros.
//
//   FSDP_MODELS_SDPA: at::scaled_dot_product_attention, LibTorch 2.0+.

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#define FSDP_MODELS_SDPA 1
#else
#define FSDP_MODELS_SDPA 0
#endif
