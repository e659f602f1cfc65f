// fsdp::ShardLayout is pure arithmetic (see [Note: flat shard layout] in
// fsdp/shard_layout.h), so it is checked exhaustively: every list of up to
// three parameter sizes drawn from a set that covers empty, scalar-sized,
// smaller-than-the-world and uneven parameters, at every world size 1-8,
// under both placements.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fsdp/shard_layout.h"
#include "harness/assertions.h"

namespace fsdp {
namespace {

std::string describe(const std::vector<int64_t>& numels, int world) {
  std::ostringstream out;
  out << "numels {";
  for (size_t i = 0; i < numels.size(); ++i) out << (i ? ", " : "") << numels[i];
  out << "} over " << world << " ranks";
  return out.str();
}

// The sizes: a padded buffer divisible by the world, the least padding,
// never an empty shard.
void check_sizes(const ShardLayout& layout, const std::vector<int64_t>& numels, int world,
                 const std::string& what) {
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  EXPECT_EQ(layout.world_size(), world) << what;
  EXPECT_EQ(layout.num_params(), static_cast<int64_t>(numels.size())) << what;
  EXPECT_EQ(layout.total_numel(), total) << what;
  EXPECT_EQ(layout.padded_numel(), layout.shard_numel() * world) << what;
  EXPECT_EQ(layout.padded_numel() % world, 0) << what;
  EXPECT_GE(layout.padded_numel(), total) << what;
  EXPECT_EQ(layout.padding(), layout.padded_numel() - total) << what;
  EXPECT_GE(layout.shard_numel(), 1) << what << ": collectives must never see empty buffers";
  if (total > 0) {
    // The smallest padding that makes the buffer divisible: under one
    // element per rank, and the shard is ceil(total / world).
    EXPECT_LT(layout.padding(), world) << what;
    EXPECT_EQ(layout.shard_numel(), (total + world - 1) / world) << what;
  } else {
    // An empty unit keeps one (padding) element per rank.
    EXPECT_EQ(layout.shard_numel(), 1) << what;
    EXPECT_EQ(layout.padding(), world) << what;
  }
}

// Slots: parameters laid end to end in order; shards one after another.
void check_slots(const ShardLayout& layout, const std::vector<int64_t>& numels,
                 const std::string& what) {
  int64_t offset = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    const auto& slot = layout.slot(static_cast<int64_t>(i));
    EXPECT_EQ(slot.offset, offset) << what << ", parameter " << i;
    EXPECT_EQ(slot.numel, numels[i]) << what << ", parameter " << i;
    offset += numels[i];
  }
  for (int r = 0; r < layout.world_size(); ++r) {
    EXPECT_EQ(layout.shard_begin(r), r * layout.shard_numel()) << what << ", rank " << r;
  }
}

// One parameter's slice on one rank: in range, at the same flat position
// seen from the parameter and from the shard, and exactly their
// intersection. Counts the elements it covers in `owners`.
void check_slice(const ShardLayout& layout, int64_t p, int r, int64_t& next_begin,
                 std::vector<int>& owners, const std::string& where) {
  const auto& slot = layout.slot(p);
  const auto s = layout.local_slice(p, r);
  // Always in range, so narrow(0, offset, numel) is valid even when empty.
  EXPECT_GE(s.numel, 0) << where;
  EXPECT_GE(s.param_begin, 0) << where;
  EXPECT_LE(s.param_begin + s.numel, slot.numel) << where;
  EXPECT_GE(s.shard_offset, 0) << where;
  EXPECT_LE(s.shard_offset + s.numel, layout.shard_numel()) << where;
  const int64_t lo = std::max(slot.offset, layout.shard_begin(r));
  const int64_t hi =
      std::min(slot.offset + slot.numel, layout.shard_begin(r) + layout.shard_numel());
  if (s.numel == 0) {
    EXPECT_LE(hi, lo) << where << ": an intersection of " << (hi - lo)
                      << " elements was reported empty";
    return;
  }
  EXPECT_EQ(s.param_begin, next_begin) << where << ": slices must tile in rank order";
  EXPECT_EQ(slot.offset + s.param_begin, layout.shard_begin(r) + s.shard_offset) << where;
  EXPECT_EQ(s.numel, hi - lo) << where;
  if (::testing::Test::HasFailure()) return;  // owners' indices rely on the range checks
  for (int64_t e = 0; e < s.numel; ++e) {
    ++owners[static_cast<size_t>(slot.offset + s.param_begin + e)];
  }
  next_begin = s.param_begin + s.numel;
}

// Local slices: each flat element of the padded buffer is owned by exactly
// one (rank, parameter) pair or is padding; each parameter's slices over
// ranks 0..world-1 tile [0, numel) in rank order.
void check_slices(const ShardLayout& layout, const std::string& what) {
  std::vector<int> owners(static_cast<size_t>(layout.padded_numel()), 0);
  for (int64_t p = 0; p < layout.num_params(); ++p) {
    int64_t next_begin = 0;  // where the next non-empty slice must start
    int64_t covered = 0;
    for (int r = 0; r < layout.world_size(); ++r) {
      check_slice(layout, p, r, next_begin, owners,
                  what + ", parameter " + std::to_string(p) + ", rank " + std::to_string(r));
      if (::testing::Test::HasFailure()) return;
      covered += layout.local_slice(p, r).numel;
    }
    EXPECT_EQ(covered, layout.slot(p).numel)
        << what << ", parameter " << p << ": the ranks' slices do not add up to the parameter";
  }
  // Slots never overlap; the elements outside every slot are padding.
  std::vector<int> in_slots(static_cast<size_t>(layout.padded_numel()), 0);
  for (int64_t p = 0; p < layout.num_params(); ++p) {
    const auto& slot = layout.slot(p);
    for (int64_t e = slot.offset; e < slot.offset + slot.numel; ++e)
      ++in_slots[static_cast<size_t>(e)];
  }
  for (int64_t e = 0; e < layout.padded_numel(); ++e) {
    EXPECT_LE(in_slots[static_cast<size_t>(e)], 1) << what << ", flat element " << e;
    EXPECT_EQ(owners[static_cast<size_t>(e)], in_slots[static_cast<size_t>(e)])
        << what << ", flat element " << e;
    if (::testing::Test::HasFailure()) return;
  }
}

// Checks every invariant of one layout; returns false at the first failure
// so an exhaustive sweep reports one case, not thousands of lines.
bool check_layout(const std::vector<int64_t>& numels, int world) {
  const std::string what = describe(numels, world);
  const ShardLayout layout(numels, world);
  check_sizes(layout, numels, world, what);
  if (::testing::Test::HasFailure()) return false;
  check_slots(layout, numels, what);
  if (::testing::Test::HasFailure()) return false;
  check_slices(layout, what);
  return !::testing::Test::HasFailure();
}

// Placement::kWholeParams: each non-empty parameter whole on exactly one
// rank, the shard exactly the most loaded rank's parameters, and no more
// than the largest parameter over an even split (the greedy bound).
bool check_whole_layout(const std::vector<int64_t>& numels, int world) {
  const std::string what = describe(numels, world) + ", whole";
  const ShardLayout layout(numels, world, ShardLayout::Placement::kWholeParams);
  EXPECT_EQ(layout.placement(), ShardLayout::Placement::kWholeParams) << what;
  check_slices(layout, what);
  if (::testing::Test::HasFailure()) return false;
  std::vector<int64_t> loads(static_cast<size_t>(world), 0);
  for (int64_t p = 0; p < layout.num_params(); ++p) {
    int holders = 0;
    for (int r = 0; r < world; ++r) {
      const auto s = layout.local_slice(p, r);
      if (s.numel == 0) continue;
      ++holders;
      loads[static_cast<size_t>(r)] += s.numel;
      EXPECT_EQ(s.numel, layout.slot(p).numel) << what << ", parameter " << p << " is split";
    }
    EXPECT_EQ(holders, layout.slot(p).numel > 0 ? 1 : 0) << what << ", parameter " << p;
  }
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  const int64_t largest = numels.empty() ? 0 : *std::max_element(numels.begin(), numels.end());
  EXPECT_EQ(layout.total_numel(), total) << what;
  EXPECT_EQ(layout.padded_numel(), layout.shard_numel() * world) << what;
  EXPECT_EQ(layout.shard_numel(),
            std::max<int64_t>(1, *std::max_element(loads.begin(), loads.end())))
      << what;
  EXPECT_LE(layout.shard_numel(), std::max<int64_t>(1, (total + world - 1) / world + largest))
      << what;
  return !::testing::Test::HasFailure();
}

// Sizes that hit every edge: empty, one element (a scalar), fewer elements
// than ranks, exactly a world size, primes, and one past a shard boundary.
const std::vector<int64_t> kSizes = {0, 1, 2, 3, 5, 7, 8, 9, 13};

TEST(ShardLayout, ExhaustiveUpToThreeParamsAndEightRanks) {
  int64_t layouts = 0;
  for (int world = 1; world <= 8; ++world) {
    ASSERT_TRUE(check_layout({}, world));
    ++layouts;
    for (int64_t a : kSizes) {
      ASSERT_TRUE(check_layout({a}, world));
      ++layouts;
      for (int64_t b : kSizes) {
        ASSERT_TRUE(check_layout({a, b}, world));
        ++layouts;
        for (int64_t c : kSizes) {
          ASSERT_TRUE(check_layout({a, b, c}, world));
          ++layouts;
        }
      }
    }
  }
  EXPECT_EQ(layouts, 8 * (1 + 9 + 81 + 729));
}

TEST(ShardLayout, WholeParamsExhaustiveUpToThreeParamsAndEightRanks) {
  for (int world = 1; world <= 8; ++world) {
    ASSERT_TRUE(check_whole_layout({}, world));
    for (int64_t a : kSizes) {
      for (int64_t b : kSizes) {
        for (int64_t c : kSizes) ASSERT_TRUE(check_whole_layout({a, b, c}, world));
      }
    }
  }
}

TEST(ShardLayout, WholeParamsRandomManyParameterLayouts) {
  std::mt19937_64 rng(20261206);
  std::uniform_int_distribution<int> count(0, 24);
  std::uniform_int_distribution<int64_t> size(0, 300);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> numels(static_cast<size_t>(count(rng)));
    for (auto& n : numels) n = size(rng);
    for (int world = 1; world <= 8; ++world) ASSERT_TRUE(check_whole_layout(numels, world));
  }
}

// The convention, worked: largest first, each to the least-loaded rank (ties
// to the lower rank); within a shard, the unit's order. {6, 5, 4, 3, 2} over
// two ranks puts 6, 3, 2 on rank 0 (11) and 5, 4 on rank 1 (9):
//   flat:   [p0 x6, p3 x3, p4 x2 | p1 x5, p2 x4, pad x2]
TEST(ShardLayout, WholeParamsWorkedExample) {
  const ShardLayout layout({6, 5, 4, 3, 2}, 2, ShardLayout::Placement::kWholeParams);
  EXPECT_EQ(layout.shard_numel(), 11);
  EXPECT_EQ(layout.padding(), 2);
  const int64_t offsets[] = {0, 11, 16, 6, 9};
  for (int64_t p = 0; p < 5; ++p) EXPECT_EQ(layout.slot(p).offset, offsets[p]) << "parameter " << p;
  EXPECT_EQ(layout.local_slice(3, 0).shard_offset, 6);
  EXPECT_EQ(layout.local_slice(2, 1).shard_offset, 5);
  EXPECT_EQ(ShardLayout({6, 5}, 2).placement(), ShardLayout::Placement::kEvenSplit);
}

TEST(ShardLayout, EverySingleParameterSizeUpTo64) {
  for (int world = 1; world <= 8; ++world) {
    for (int64_t n = 0; n <= 64; ++n) ASSERT_TRUE(check_layout({n}, world));
  }
}

TEST(ShardLayout, RandomManyParameterLayouts) {
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<int> count(0, 12);
  std::uniform_int_distribution<int64_t> size(0, 300);
  std::bernoulli_distribution tiny(0.3);
  std::uniform_int_distribution<int64_t> tiny_size(0, 3);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> numels(static_cast<size_t>(count(rng)));
    for (auto& n : numels) n = tiny(rng) ? tiny_size(rng) : size(rng);
    for (int world = 1; world <= 8; ++world) ASSERT_TRUE(check_layout(numels, world));
  }
}

// A worked example, to pin down the convention rather than only invariants:
// 5 + 3 elements over 3 ranks is 8 elements, padded to 9, 3 per rank.
//   flat:   [a0 a1 a2 | a3 a4 b0 | b1 b2 pad]
TEST(ShardLayout, WorkedExampleFiveAndThreeOverThreeRanks) {
  const ShardLayout layout({5, 3}, 3);
  EXPECT_EQ(layout.shard_numel(), 3);
  EXPECT_EQ(layout.padding(), 1);
  struct Expected {
    int64_t param;
    int rank;
    int64_t param_begin, numel, shard_offset;
  };
  const Expected cases[] = {
      {0, 0, 0, 3, 0}, {0, 1, 3, 2, 0}, {1, 1, 0, 1, 2}, {1, 2, 1, 2, 0},
  };
  for (const auto& c : cases) {
    const auto s = layout.local_slice(c.param, c.rank);
    EXPECT_EQ(s.param_begin, c.param_begin) << "param " << c.param << " rank " << c.rank;
    EXPECT_EQ(s.numel, c.numel) << "param " << c.param << " rank " << c.rank;
    EXPECT_EQ(s.shard_offset, c.shard_offset) << "param " << c.param << " rank " << c.rank;
  }
  EXPECT_EQ(layout.local_slice(0, 2).numel, 0);
  EXPECT_EQ(layout.local_slice(1, 0).numel, 0);
}

TEST(ShardLayout, ScalarParameterLivesOnExactlyOneRank) {
  for (int world = 1; world <= 8; ++world) {
    const ShardLayout layout({1}, world);
    int holders = 0;
    for (int r = 0; r < world; ++r) holders += static_cast<int>(layout.local_slice(0, r).numel);
    EXPECT_EQ(holders, 1) << world << " ranks";
    EXPECT_EQ(layout.local_slice(0, 0).numel, 1) << "rank 0 holds the scalar";
  }
}

TEST(ShardLayout, ParameterSmallerThanTheWorldLeavesRanksEmpty) {
  // 3 elements over 8 ranks: shard of 1 element; ranks 3-7 hold only padding.
  const ShardLayout layout({3}, 8);
  EXPECT_EQ(layout.shard_numel(), 1);
  EXPECT_EQ(layout.padding(), 5);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(layout.local_slice(0, r).numel, r < 3 ? 1 : 0) << r;
}

TEST(ShardLayout, EmptyUnitAndDefaultLayout) {
  const ShardLayout empty({}, 4);
  EXPECT_EQ(empty.num_params(), 0);
  EXPECT_EQ(empty.total_numel(), 0);
  EXPECT_EQ(empty.shard_numel(), 1);
  EXPECT_EQ(empty.padded_numel(), 4);

  const ShardLayout zero_sized({0, 0}, 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(zero_sized.local_slice(0, r).numel, 0);
    EXPECT_EQ(zero_sized.local_slice(1, r).numel, 0);
  }

  const ShardLayout defaulted;
  EXPECT_EQ(defaulted.world_size(), 1);
  EXPECT_EQ(defaulted.num_params(), 0);
  EXPECT_EQ(defaulted.total_numel(), 0);
}

TEST(ShardLayout, LargeSizesDoNotOverflow) {
  const int64_t big = int64_t{1} << 40;  // 4 TiB of fp32: arithmetic only
  const ShardLayout layout({big, 3, big + 1}, 7);
  EXPECT_EQ(layout.total_numel(), 2 * big + 4);
  EXPECT_EQ(layout.shard_numel(), (2 * big + 4 + 6) / 7);
  int64_t covered = 0;
  for (int r = 0; r < 7; ++r) covered += layout.local_slice(2, r).numel;
  EXPECT_EQ(covered, big + 1);
}

TEST(ShardLayout, RejectsBadInputWithClearErrors) {
  EXPECT_THROWS_WITH(ShardLayout({4}, 0), "the world size must be at least 1");
  EXPECT_THROWS_WITH(ShardLayout({4}, -2), "cannot shard over -2 ranks");
  EXPECT_THROWS_WITH(ShardLayout({4, -1}, 2), "cannot have -1 elements");
  const ShardLayout layout({4}, 2);
  EXPECT_THROWS_WITH(layout.local_slice(0, 2), "rank 2 is outside the layout's world of 2 ranks");
  EXPECT_THROWS_WITH(layout.local_slice(0, -1), "rank -1 is outside");
  EXPECT_ANY_THROW(layout.local_slice(1, 0));  // no parameter 1
  EXPECT_ANY_THROW(layout.slot(5));
}

}  // namespace
}  // namespace fsdp
