#pragma once
// An asynchronous collective in flight. Every collective in libfsdp returns
// one; callers issue several and wait later, which is how communication
// overlaps compute.

#include <memory>

namespace fsdp {

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished. Throws c10::Error naming the
  // operation, the group and the cause if it failed or ran past the group's
  // timeout. Waiting twice is allowed; a failure is rethrown each time.
  virtual void wait() = 0;
  // True once the collective finished, successfully or not. Never blocks.
  virtual bool is_completed() const = 0;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace fsdp
