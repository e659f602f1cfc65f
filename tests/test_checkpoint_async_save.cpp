// fsdp::ckpt::AsyncSaver on in-process ranks (threads, one Gloo group each):
// what it writes, when its failures surface, and one save at a time. See
// [Note: saving while training] in include/fsdp/checkpoint/async_save.h.
// Then the host memory its copies live in (src/checkpoint/host_copies.h).

#include "fsdp/checkpoint/async_save.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "checkpoint/host_copies.h"
#include "checkpoint/save_hook.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/run_dir.h"
#include "fsdp/cpu_allocation_counter.h"
#include "harness/assertions.h"
#include "harness/rank_harness.h"
#include "harness/temp_dir.h"

using fsdp::ckpt::AsyncSaver;
using fsdp::ckpt::Reader;
using fsdp::ckpt::SaveOptions;
using fsdp::ckpt::TensorPiece;
using fsdp::ckpt::detail::HostCopies;
using fsdp::ckpt::testing::SavePhase;
using fsdp::testing::RankContext;
using fsdp::testing::run_ranks;

namespace {

class TempDir : public fsdp::testing::TempDir {
 public:
  TempDir() : fsdp::testing::TempDir("fsdp-ckpt-async") {}
};

// Removes the process-wide save hook when the test ends, passing or not.
struct ScopedSaveHook {
  explicit ScopedSaveHook(fsdp::ckpt::testing::SaveHook hook) {
    fsdp::ckpt::testing::set_save_hook(std::move(hook));
  }
  ~ScopedSaveHook() { fsdp::ckpt::testing::set_save_hook(nullptr); }
};

constexpr int64_t kNumel = 1000;

// The full "weight": 0, 1, ..., kNumel - 1.
at::Tensor full_weight() { return at::arange(kNumel, at::kFloat); }

// This rank's half of a weight, as a flat shard, and the piece naming it.
at::Tensor shard_of(const at::Tensor& full, const RankContext& ctx) {
  const int64_t chunk = kNumel / ctx.world_size;
  return full.slice(0, ctx.rank * chunk, (ctx.rank + 1) * chunk).clone();
}
std::vector<TensorPiece> pieces_of(const at::Tensor& shard, const RankContext& ctx) {
  return {{"weight", {kNumel}, at::kFloat, ctx.rank * shard.numel(), shard}};
}

SaveOptions at_step(int64_t step) {
  SaveOptions options;
  options.step = step;
  return options;
}

// Waits, with a limit, until `flag` is set: a hook that holds a background
// save back must not hang the test if the main thread never releases it.
void wait_for(const std::atomic<bool>& flag) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > limit) throw std::runtime_error("hook: never released");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

// The background save is held back until every rank has changed its shard
// and run world collectives: the checkpoint still holds the shards as they
// were at save(), and training's collectives did not wait for the save.
TEST(AsyncSave, WritesTheShardsAsTheyWereAtSaveWhileTrainingGoesOn) {
  TempDir tmp;
  const std::string dir = tmp / "step-7";
  std::atomic<int> ranks_trained{0};
  std::atomic<bool> released{false};
  ScopedSaveHook hook([&](int, SavePhase phase, const std::string&) {
    if (phase == SavePhase::kBeforeDataFile) wait_for(released);
  });
  run_ranks(2, [&](RankContext& ctx) {
    AsyncSaver saver(*ctx.group);
    at::Tensor shard = shard_of(full_weight(), ctx);
    TORCH_CHECK(!saver.save(dir, pieces_of(shard, ctx), at_step(7)), "no save came before");
    TORCH_CHECK(saver.in_flight() && !saver.poll(), "the save is held back by the hook");
    shard.fill_(-1);  // an optimizer step
    for (int i = 0; i < 3; ++i) {
      at::Tensor t = at::ones({4});
      ctx.group->all_reduce(t, fsdp::ReduceOp::kSum)->wait();
      TORCH_CHECK(t.equal(at::full({4}, 2.0f)), "rank ", ctx.rank, ": all-reduce gave ", t);
    }
    if (++ranks_trained == 2) released = true;
    const auto finished = saver.wait();
    TORCH_CHECK(finished && finished->dir == dir && finished->step == 7, "rank ", ctx.rank);
    TORCH_CHECK(finished->copy_seconds >= 0 && finished->write_seconds > 0, "rank ", ctx.rank);
    TORCH_CHECK(!saver.in_flight() && !saver.poll() && !saver.wait(), "reported once");
  });
  const Reader reader = Reader::open(dir);
  EXPECT_EQ(reader.step(), 7);
  reader.verify_all();
  EXPECT_TRUE(at::equal(reader.read_full("weight"), full_weight()));
}

// poll() never throws: a failed save throws at the next wait() or save(), on
// every rank, once; the saver then saves again.
TEST(AsyncSave, AFailureThrowsOnEveryRankAtTheNextWaitOrSave) {
  TempDir tmp;
  ScopedSaveHook hook([](int rank, SavePhase phase, const std::string& path) {
    if (rank == 1 && phase == SavePhase::kBeforeDataFile && path.find("/bad-") != std::string::npos)
      throw std::runtime_error("No space left on device (injected)");
  });
  run_ranks(2, [&](RankContext& ctx) {
    AsyncSaver saver(*ctx.group);
    const at::Tensor shard = shard_of(full_weight(), ctx);
    TORCH_CHECK(!saver.save(tmp / "bad-1", pieces_of(shard, ctx), at_step(1)), "the first save");
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (saver.in_flight()) {
      TORCH_CHECK(!saver.poll(), "a failed save is not reported as finished");
      TORCH_CHECK(std::chrono::steady_clock::now() < limit, "the failed save never ended");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_THROWS_WITH(saver.wait(), "checkpoint save to '" + tmp / "bad-1" + "' failed");
    EXPECT_FALSE(saver.wait()) << "a failure is thrown once";

    TORCH_CHECK(!saver.save(tmp / "bad-2", pieces_of(shard, ctx), at_step(2)), "bad-1 failed");
    EXPECT_THROWS_WITH((void)saver.save(tmp / "good-3", pieces_of(shard, ctx), at_step(3)),
                       "rank 1: No space left on device (injected)");
    TORCH_CHECK(!saver.save(tmp / "good-3", pieces_of(shard, ctx), at_step(3)), "bad-2 failed");
    const auto finished = saver.wait();
    TORCH_CHECK(finished && finished->step == 3, "rank ", ctx.rank,
                ": the save after the failures");
  });
  EXPECT_TRUE(at::equal(Reader::open(tmp / "good-3").read_full("weight"), full_weight()));
  EXPECT_FALSE(fsdp::ckpt::is_checkpoint_dir(tmp / "bad-1"));
  EXPECT_FALSE(fsdp::ckpt::is_checkpoint_dir(tmp / "bad-2"));
}

// The first save is slowed before its data file and before its index. The
// second save() returns only after the first committed, and no rank writes
// the second before then. The shard changes between the saves: each
// checkpoint holds the values of its own save() (the second's copies reuse
// the first's memory only once the first is written).
TEST(AsyncSave, ASecondSaveWaitsForTheFirstToCommit) {
  TempDir tmp;
  const std::string first = tmp / "first";
  std::atomic<int> overlapping_writes{0};
  ScopedSaveHook hook([&](int, SavePhase phase, const std::string& path) {
    const bool of_first = path.rfind(first, 0) == 0;
    if (of_first && (phase == SavePhase::kBeforeDataFile || phase == SavePhase::kBeforeIndex)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    if (!of_first && phase == SavePhase::kBeforeDataFile && !fsdp::ckpt::is_checkpoint_dir(first)) {
      ++overlapping_writes;
    }
  });
  run_ranks(2, [&](RankContext& ctx) {
    AsyncSaver saver(*ctx.group);
    const at::Tensor shard = shard_of(full_weight(), ctx);
    TORCH_CHECK(!saver.save(first, pieces_of(shard, ctx), at_step(1)), "the first save");
    shard.neg_();  // an optimizer step
    (void)saver.save(tmp / "second", pieces_of(shard, ctx), at_step(2));
    TORCH_CHECK(fsdp::ckpt::is_checkpoint_dir(first), "rank ", ctx.rank,
                ": the second save() returned before the first committed");
    const auto finished = saver.wait();
    TORCH_CHECK(finished && finished->step == 2, "rank ", ctx.rank, ": wait() returns the second");
  });
  EXPECT_EQ(overlapping_writes.load(), 0);
  EXPECT_EQ(Reader::open(first).step(), 1);
  EXPECT_EQ(Reader::open(tmp / "second").step(), 2);
  EXPECT_TRUE(at::equal(Reader::open(first).read_full("weight"), full_weight()));
  EXPECT_TRUE(at::equal(Reader::open(tmp / "second").read_full("weight"), -full_weight()));
}

// Three saves, each committed save seen by a different call: the first by
// the save() that waited for it (the first is held back until every rank has
// polled), the second by poll(), the third by wait(). Each is returned once,
// none lost: a caller that logs them, or prunes old checkpoints after each,
// sees every commit.
TEST(AsyncSave, EachCommittedSaveIsReturnedOnceByPollSaveOrWait) {
  TempDir tmp;
  std::atomic<int> ranks_polled{0};
  std::atomic<bool> released{false};
  ScopedSaveHook hook([&](int, SavePhase phase, const std::string& path) {
    if (phase == SavePhase::kBeforeIndex && path.find("/step-1") != std::string::npos) {
      wait_for(released);
    }
  });
  run_ranks(2, [&](RankContext& ctx) {
    AsyncSaver saver(*ctx.group);
    const at::Tensor shard = shard_of(full_weight(), ctx);
    TORCH_CHECK(!saver.save(tmp / "step-1", pieces_of(shard, ctx), at_step(1)), "the first save");
    TORCH_CHECK(!saver.poll(), "rank ", ctx.rank, ": step 1 is held back before its index");
    if (++ranks_polled == 2) released = true;
    const auto by_save = saver.save(tmp / "step-2", pieces_of(shard, ctx), at_step(2));
    TORCH_CHECK(by_save && by_save->step == 1 && by_save->dir == tmp / "step-1", "rank ", ctx.rank,
                ": save() returns the save it waited for");

    std::optional<fsdp::ckpt::FinishedSave> by_poll;
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!(by_poll = saver.poll())) {
      TORCH_CHECK(std::chrono::steady_clock::now() < limit, "step 2 never committed");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    TORCH_CHECK(by_poll->step == 2, "rank ", ctx.rank, ": poll() returned step ", by_poll->step);
    TORCH_CHECK(!saver.save(tmp / "step-3", pieces_of(shard, ctx), at_step(3)), "rank ", ctx.rank,
                ": step 2 was returned by poll() already");

    const auto by_wait = saver.wait();
    TORCH_CHECK(by_wait && by_wait->step == 3, "rank ", ctx.rank, ": wait() returns step 3");
    TORCH_CHECK(!saver.poll() && !saver.wait(), "rank ", ctx.rank, ": each save returned once");
  });
}

// [Note: host copies outside the heap] in src/checkpoint/host_copies.h: the
// copies are contiguous host tensors of their own, whatever the source's
// layout, and take nothing from LibTorch's CPU allocator, whose freed memory
// training reuses every step.
TEST(HostCopies, HoldTheValuesInMemoryOutsideLibTorchsCpuAllocator) {
  const fsdp::CpuAllocationCounter& counter = fsdp::CpuAllocationCounter::install();
  const at::Tensor matrix = at::arange(12, at::kFloat).reshape({3, 4});
  const at::Tensor ids = at::arange(5, at::kLong);
  const at::Tensor empty = at::empty({0}, at::kBFloat16);
  const at::Tensor scalar = at::scalar_tensor(2.5, at::kDouble);
  std::vector<TensorPiece> pieces = {
      {"transposed", {4, 3}, at::kFloat, 0, matrix.t()},  // not contiguous
      {"ids", {5}, at::kLong, 0, ids},
      {"empty", {0}, at::kBFloat16, 0, empty},
      {"scalar", {}, at::kDouble, 0, scalar}};
  const int64_t live_bytes = counter.current_bytes();
  HostCopies copies;
  copies.copy(pieces);
  EXPECT_EQ(counter.current_bytes(), live_bytes) << "the copies came from LibTorch's CPU allocator";
  EXPECT_EQ(copies.mapped_bytes(), size_t{2} << 20)
      << "one huge page's worth, the smallest mapping";

  matrix.fill_(-1);  // training goes on
  ids.fill_(-1);
  EXPECT_TRUE(at::equal(pieces[0].data, at::arange(12, at::kFloat).reshape({3, 4}).t()));
  EXPECT_TRUE(pieces[0].data.is_contiguous());
  EXPECT_TRUE(at::equal(pieces[1].data, at::arange(5, at::kLong)));
  EXPECT_EQ(pieces[2].data.numel(), 0);
  EXPECT_EQ(pieces[2].data.scalar_type(), at::kBFloat16);
  EXPECT_EQ(pieces[3].data.dim(), 0);
  EXPECT_EQ(pieces[3].data.item<double>(), 2.5);
  for (const TensorPiece& piece : pieces) {
    EXPECT_TRUE(piece.data.device().is_cpu()) << piece.name;
    EXPECT_FALSE(piece.data.requires_grad()) << piece.name;
  }
}

// Each save reuses the last one's memory once none of its copies is alive;
// a copy still alive is never overwritten, and pieces that outgrow the
// mapping get a larger one.
TEST(HostCopies, ReuseTheirMemoryOnceThePreviousCopiesAreGone) {
  const auto filled = [](float value, int64_t numel) {
    return std::vector<TensorPiece>{{"w", {numel}, at::kFloat, 0, at::full({numel}, value)}};
  };
  HostCopies copies;
  auto first = filled(1, 1000);
  copies.copy(first);
  const void* memory = first[0].data.data_ptr();
  first.clear();  // the first save written

  auto second = filled(2, 1000);
  copies.copy(second);
  EXPECT_EQ(second[0].data.data_ptr(), memory) << "the first save's memory, reused";
  auto third = filled(3, 1000);
  copies.copy(third);  // while the second's copies are alive
  EXPECT_NE(third[0].data.data_ptr(), memory);
  EXPECT_TRUE(at::equal(second[0].data, at::full({1000}, 2.0f))) << "overwritten while alive";
  EXPECT_TRUE(at::equal(third[0].data, at::full({1000}, 3.0f)));
  second.clear();
  third.clear();

  const int64_t three_mib = int64_t{3} << 18;  // floats
  auto larger = filled(4, three_mib);
  copies.copy(larger);
  EXPECT_EQ(copies.mapped_bytes(), size_t{4} << 20);
  EXPECT_TRUE(at::equal(larger[0].data, at::full({three_mib}, 4.0f)));
}

// [Note: reserving the host copies]: reserve() maps the memory and faults
// every page of it in at once; a copy that fits lands in it without mapping
// again, and a reservation already held is kept.
TEST(HostCopies, AReservationIsFaultedInAndTakenByTheNextCopy) {
  HostCopies copies;
  copies.reserve(int64_t{3} << 20);
  ASSERT_EQ(copies.mapped_bytes(), size_t{4} << 20);
  std::vector<TensorPiece> pieces = {{"w", {8}, at::kFloat, 0, at::ones({8})}};
  copies.copy(pieces);
  EXPECT_EQ(copies.mapped_bytes(), size_t{4} << 20) << "the copy fit: no new mapping";
  void* start = pieces[0].data.data_ptr();  // the first copy starts the mapping
  const size_t pages = copies.mapped_bytes() / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident(pages);
  ASSERT_EQ(::mincore(start, copies.mapped_bytes(), resident.data()), 0) << std::strerror(errno);
  EXPECT_EQ(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }),
            static_cast<std::ptrdiff_t>(pages))
      << "pages the reservation left for a save to fault in";
  pieces.clear();
  copies.reserve(int64_t{1} << 20);
  std::vector<TensorPiece> again = {{"w", {8}, at::kFloat, 0, at::ones({8})}};
  copies.copy(again);
  EXPECT_EQ(again[0].data.data_ptr(), start) << "a smaller reservation kept the mapping";
}

// reserve() cannot take the memory a save in flight still reads, nor a
// negative size; both errors name the value and the fix.
TEST(AsyncSave, ReserveRefusesASaveInFlightAndNegativeBytes) {
  TempDir tmp;
  run_ranks(1, [&](RankContext& ctx) {
    AsyncSaver saver(*ctx.group);
    EXPECT_THROWS_WITH(saver.reserve(-1), "AsyncSaver::reserve(-1): the bytes must be 0 or more");
    at::Tensor shard = shard_of(full_weight(), ctx);
    (void)saver.save(tmp / "step-1", pieces_of(shard, ctx), at_step(1));
    EXPECT_THROWS_WITH(saver.reserve(4096),
                       "reserve(4096) was called while a save is in flight; call it before the "
                       "first save() or after wait()");
    (void)saver.wait();
    saver.reserve(4096);
  });
}
