// CachingAllocator against byte counts computed by hand from PyTorch's rules
// (c10/cuda/CUDACachingAllocator.cpp @ eb42ad6eca0ce61e7c581212b4bf32f991425571).
#include "comptrain/sim/memory/caching_allocator.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

namespace comptrain::sim {
namespace {

constexpr std::int64_t MiB = 1024 * 1024;

CachingAllocator make(std::int64_t capacity, bool expandable = false) {
  return CachingAllocator(CachingAllocatorOptions{capacity, expandable});
}

// The snapshot agrees with the counters: segments sum to reserved(), allocated blocks to
// allocated().
void expect_consistent(const CachingAllocator& a) {
  std::int64_t total = 0;
  std::int64_t in_use = 0;
  for (const auto& s : a.snapshot()) {
    std::int64_t blocks = 0;
    for (const auto& b : s.blocks) blocks += b.size;
    EXPECT_EQ(blocks, s.total_size);
    total += s.total_size;
    in_use += s.allocated_size;
  }
  EXPECT_EQ(total, a.reserved());
  EXPECT_EQ(in_use, a.allocated());
}

struct B {
  std::int64_t size;
  bool allocated;
};
void expect_blocks(const CachingAllocator::SegmentInfo& s, const std::vector<B>& expected) {
  ASSERT_EQ(s.blocks.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(s.blocks[i].size, expected[i].size) << "block " << i;
    EXPECT_EQ(s.blocks[i].allocated, expected[i].allocated) << "block " << i;
  }
}

TEST(CachingAllocator, ConstantsAreTorchs) {
  EXPECT_EQ(CachingAllocator::kMinBlockSize, 512);
  EXPECT_EQ(CachingAllocator::kSmallSize, 1048576);
  EXPECT_EQ(CachingAllocator::kSmallBuffer, 2097152);
  EXPECT_EQ(CachingAllocator::kLargeBuffer, 20971520);
  EXPECT_EQ(CachingAllocator::kMinLargeAlloc, 10485760);
  EXPECT_EQ(CachingAllocator::kRoundLarge, 2097152);
}

TEST(CachingAllocator, RoundSizeAndAllocationSize) {
  // round_size: < 512 -> 512, else up to a multiple of 512.
  EXPECT_EQ(CachingAllocator::round_size(1), 512);
  EXPECT_EQ(CachingAllocator::round_size(512), 512);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024);
  EXPECT_EQ(CachingAllocator::round_size(MiB + 1), 1049088);  // 2049 * 512
  // get_allocation_size: <= 1 MiB -> 2 MiB; < 10 MiB -> 20 MiB; else up to a multiple of 2 MiB.
  EXPECT_EQ(CachingAllocator::allocation_size(512), 2 * MiB);
  EXPECT_EQ(CachingAllocator::allocation_size(MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::allocation_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::allocation_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::allocation_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(CachingAllocator::allocation_size(10 * MiB + 512), 12 * MiB);
  EXPECT_TRUE(CachingAllocator::is_small_request(MiB));
  EXPECT_FALSE(CachingAllocator::is_small_request(MiB + 512));
}

TEST(CachingAllocator, OneByteTakesA512BlockOfA2MiBSmallSegment) {
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(1, 1));
  EXPECT_EQ(a.block_size(1), 512);
  EXPECT_EQ(a.allocated(), 512);
  EXPECT_EQ(a.requested(), 1);
  EXPECT_EQ(a.reserved(), 2097152);
  const auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_TRUE(snap[0].small_pool);
  expect_blocks(snap[0], {{512, true}, {2097152 - 512, false}});  // remainder 2096640 >= 512: split
  expect_consistent(a);
}

TEST(CachingAllocator, JustAbove1MiBIsALargeRequestInA20MiBSegmentWithoutRoundingTo2MiB) {
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(1, MiB + 1));
  // round_size: 1048577 -> 1049088 (> kSmallSize: large pool); < 10 MiB -> a 20 MiB segment;
  // remainder 20971520 - 1049088 = 19922432 > 1 MiB: split. The block stays 1049088 B.
  EXPECT_EQ(a.block_size(1), 1049088);
  EXPECT_EQ(a.allocated(), 1049088);
  EXPECT_EQ(a.reserved(), 20971520);
  const auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_FALSE(snap[0].small_pool);
  expect_blocks(snap[0], {{1049088, true}, {19922432, false}});
  expect_consistent(a);
}

TEST(CachingAllocator, SmallRequestsCarveOneSegmentAndReuseItsRemainder) {
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(1, 1000));  // 1024
  ASSERT_TRUE(a.allocate(2, 3000));  // 3072, from the remainder 2097152 - 1024
  EXPECT_EQ(a.allocated(), 4096);
  EXPECT_EQ(a.reserved(), 2097152);
  expect_blocks(a.snapshot()[0], {{1024, true}, {3072, true}, {2093056, false}});  // 2097152 - 4096
  // 1 MiB from the 2093056 B remainder; 2093056 - 1048576 = 1044480 >= 512: split.
  ASSERT_TRUE(a.allocate(3, MiB));
  EXPECT_EQ(a.reserved(), 2097152);
  EXPECT_EQ(a.allocated(), 4096 + 1048576);
  // Exactly the remainder: no split, the segment is full.
  ASSERT_TRUE(a.allocate(4, 1044480));
  EXPECT_EQ(a.allocated(), 2097152);
  EXPECT_EQ(a.reserved(), 2097152);
  EXPECT_EQ(a.segment_count(), 1);
  // The next small request needs a second 2 MiB segment.
  ASSERT_TRUE(a.allocate(5, 1));
  EXPECT_EQ(a.reserved(), 4194304);
  EXPECT_EQ(a.segment_count(), 2);
  expect_consistent(a);
}

TEST(CachingAllocator, LargePoolSplitsOnlyWhenTheRemainderExceeds1MiB) {
  auto a = make(1024 * MiB);
  // 11 MiB -> a 12 MiB segment; remainder 1048576 is not > kSmallSize: the block is the segment.
  ASSERT_TRUE(a.allocate(1, 11 * MiB));
  EXPECT_EQ(a.block_size(1), 12 * MiB);
  EXPECT_EQ(a.allocated(), 12582912);
  EXPECT_EQ(a.requested(), 11534336);
  // 11 MiB - 512 -> a 12 MiB segment; remainder 1049088 > 1048576: split.
  ASSERT_TRUE(a.allocate(2, 11 * MiB - 512));
  EXPECT_EQ(a.block_size(2), 11533824);
  EXPECT_EQ(a.allocated(), 12582912 + 11533824);
  EXPECT_EQ(a.reserved(), 2 * 12582912);
  // The 1049088 B remainder serves a large request of the same rounded size, no new segment.
  ASSERT_TRUE(a.allocate(3, MiB + 1));
  EXPECT_EQ(a.block_size(3), 1049088);
  EXPECT_EQ(a.reserved(), 25165824);
  EXPECT_EQ(a.segment_count(), 2);
  expect_consistent(a);
}

TEST(CachingAllocator, AFreedBlockIsCachedAndReusedByAnEqualOrSmallerRequest) {
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(1, 12 * MiB));
  a.free(1);
  EXPECT_EQ(a.allocated(), 0);
  EXPECT_EQ(a.reserved(), 12582912);  // cached, not returned
  ASSERT_TRUE(a.allocate(2, 12 * MiB));
  EXPECT_EQ(a.reserved(), 12582912);
  EXPECT_EQ(a.num_device_alloc(), 1);
  a.free(2);
  // 11 MiB fits the 12 MiB block; remainder 1 MiB is not > 1 MiB: the whole block is taken.
  ASSERT_TRUE(a.allocate(3, 11 * MiB));
  EXPECT_EQ(a.block_size(3), 12582912);
  EXPECT_EQ(a.allocated(), 12582912);
  EXPECT_EQ(a.num_device_alloc(), 1);
  expect_consistent(a);
}

// Per-stream blocks (get_free_block's `(*it)->stream != p.stream()`): a block another stream
// freed stays reserved and cannot serve this stream; the same stream reuses it.
TEST(CachingAllocator, AFreedBlockServesOnlyItsOwnStream) {
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(1, 100 * MiB, 0));
  a.free(1);
  ASSERT_TRUE(a.allocate(2, 100 * MiB, 1));  // stream 1: a new 100 MiB segment
  EXPECT_EQ(a.reserved(), 200 * MiB);
  EXPECT_EQ(a.num_device_alloc(), 2);
  a.free(2);
  ASSERT_TRUE(a.allocate(3, 60 * MiB, 0));  // stream 0 splits its own cached segment
  ASSERT_TRUE(a.allocate(4, 60 * MiB, 1));  // and stream 1 its own
  EXPECT_EQ(a.reserved(), 200 * MiB);
  EXPECT_EQ(a.num_device_alloc(), 2);
  const auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].stream, 0);
  EXPECT_EQ(snap[1].stream, 1);
  expect_blocks(snap[0], {{60 * MiB, true}, {40 * MiB, false}});
  expect_blocks(snap[1], {{60 * MiB, true}, {40 * MiB, false}});
  // A 40 MiB request on stream 2 finds nothing of its own, though 80 MiB are free.
  ASSERT_TRUE(a.allocate(5, 40 * MiB, 2));
  EXPECT_EQ(a.reserved(), 240 * MiB);
  // Nor does stream 0 take stream 1's whole free segment (stream 0's own 40 MiB are too small).
  a.free(4);
  ASSERT_TRUE(a.allocate(6, 100 * MiB, 0));
  EXPECT_EQ(a.reserved(), 340 * MiB);
  expect_consistent(a);
}

// Out of memory on one stream releases every stream's free segments before the retry.
TEST(CachingAllocator, OutOfMemoryReleasesOtherStreamsCachedSegments) {
  auto a = make(200 * MiB);
  ASSERT_TRUE(a.allocate(1, 150 * MiB, 1));
  a.free(1);
  ASSERT_TRUE(a.allocate(2, 100 * MiB, 0));  // 250 MiB would exceed 200: stream 1's segment goes
  EXPECT_EQ(a.num_alloc_retries(), 1);
  EXPECT_EQ(a.reserved(), 100 * MiB);
  expect_consistent(a);
}

// With expandable segments each stream maps pages of its own segment per pool.
TEST(CachingAllocator, ExpandableSegmentsArePerStream) {
  auto a = make(1024 * MiB, true);
  ASSERT_TRUE(a.allocate(1, 30 * MiB, 0));  // stream 0 maps 2 pages of 20 MiB
  a.free(1);
  ASSERT_TRUE(a.allocate(2, 30 * MiB, 1));  // stream 1: its own segment, 2 more pages
  EXPECT_EQ(a.reserved(), 80 * MiB);
  EXPECT_EQ(a.segment_count(), 2);
  a.free(2);
  ASSERT_TRUE(a.allocate(3, 40 * MiB, 0));  // stream 0's 40 MiB mapped already
  EXPECT_EQ(a.reserved(), 80 * MiB);
  expect_consistent(a);
}

TEST(CachingAllocator, BestFitBySizeThenByAddress) {
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(1, 12 * MiB));  // segment at 0
  ASSERT_TRUE(a.allocate(2, 16 * MiB));  // segment at 12 MiB
  ASSERT_TRUE(a.allocate(3, 12 * MiB));  // segment at 28 MiB
  a.free(1);
  a.free(2);
  a.free(3);
  // 11.5 MiB: the smallest fit is 12 MiB, twice; the lower address wins. Remainder 0.5 MiB: no split.
  ASSERT_TRUE(a.allocate(4, 12058624));
  EXPECT_EQ(a.block_size(4), 12582912);
  auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].allocated_size, 12582912);
  EXPECT_EQ(snap[2].allocated_size, 0);
  // 13 MiB: only the 16 MiB block fits; remainder 3 MiB > 1 MiB: split.
  ASSERT_TRUE(a.allocate(5, 13 * MiB));
  snap = a.snapshot();
  expect_blocks(snap[1], {{13631488, true}, {3145728, false}});
  EXPECT_EQ(a.reserved(), 41943040);  // 12 + 16 + 12 MiB, no new segment
  expect_consistent(a);
}

TEST(CachingAllocator, FragmentationForcesANewSegmentAlthoughTheFreeTotalWouldSuffice) {
  auto a = make(1024 * MiB);
  // Five 4 MiB requests fill one 20 MiB segment: remainders 16, 12, 8, 4 MiB are split off,
  // the fifth takes the last 4 MiB whole.
  for (std::size_t id = 1; id <= 5; ++id) ASSERT_TRUE(a.allocate(id, 4 * MiB));
  EXPECT_EQ(a.reserved(), 20971520);
  EXPECT_EQ(a.allocated(), 20971520);
  a.free(1);
  a.free(3);
  a.free(5);
  // Free: three separate 4 MiB blocks = 12 MiB, but no single block holds 8 MiB.
  expect_blocks(a.snapshot()[0],
                {{4 * MiB, false}, {4 * MiB, true}, {4 * MiB, false}, {4 * MiB, true}, {4 * MiB, false}});
  ASSERT_TRUE(a.allocate(6, 8 * MiB));  // 8 MiB < 10 MiB: a new 20 MiB segment
  EXPECT_EQ(a.reserved(), 41943040);
  EXPECT_EQ(a.allocated(), 16777216);  // 4 + 4 + 8 MiB
  EXPECT_EQ(a.segment_count(), 2);
  expect_consistent(a);
}

TEST(CachingAllocator, FreedBlocksMergeWithinTheirSegment) {
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(1, 4 * MiB));
  ASSERT_TRUE(a.allocate(2, 4 * MiB));
  ASSERT_TRUE(a.allocate(3, 4 * MiB));  // [4][4][4][8 free]
  a.free(1);                            // [4 free][4][4][8 free]
  a.free(3);                            // [4 free][4][12 free]
  expect_blocks(a.snapshot()[0], {{4 * MiB, false}, {4 * MiB, true}, {12 * MiB, false}});
  a.free(2);  // [20 free]
  expect_blocks(a.snapshot()[0], {{20 * MiB, false}});
  // A 20 MiB request fits the merged block: no new segment.
  ASSERT_TRUE(a.allocate(4, 20 * MiB));
  EXPECT_EQ(a.reserved(), 20971520);
  EXPECT_EQ(a.num_device_alloc(), 1);
  a.free(4);
  // Unsplit again, so empty_cache returns it.
  a.empty_cache();
  EXPECT_EQ(a.reserved(), 0);
  EXPECT_EQ(a.segment_count(), 0);
  EXPECT_EQ(a.num_device_free(), 1);
  expect_consistent(a);
}

TEST(CachingAllocator, NoMergingAcrossSegmentsEvenAtAdjacentAddresses) {
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(1, 12 * MiB));
  ASSERT_TRUE(a.allocate(2, 12 * MiB));
  auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[1].address, snap[0].address + 12582912);  // adjacent
  a.free(1);
  a.free(2);
  snap = a.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  expect_blocks(snap[0], {{12 * MiB, false}});
  expect_blocks(snap[1], {{12 * MiB, false}});
  // 24 MiB free in total, but in two segments: a new 24 MiB segment.
  ASSERT_TRUE(a.allocate(3, 24 * MiB));
  EXPECT_EQ(a.reserved(), 50331648);  // 12 + 12 + 24 MiB
  EXPECT_EQ(a.segment_count(), 3);
  expect_consistent(a);
}

TEST(CachingAllocator, OutOfMemoryReleasesCachedSegmentsAndRetries) {
  auto a = make(40 * MiB);
  ASSERT_TRUE(a.allocate(1, 12 * MiB));
  ASSERT_TRUE(a.allocate(2, 12 * MiB));
  a.free(1);
  a.free(2);
  // 20 MiB needs a new segment: 24 + 20 = 44 MiB > 40 MiB. Both cached segments are unsplit:
  // released (reserved 0), then 20 MiB <= 40 MiB.
  ASSERT_TRUE(a.allocate(3, 20 * MiB));
  EXPECT_EQ(a.reserved(), 20971520);
  EXPECT_EQ(a.peak_reserved(), 25165824);
  EXPECT_EQ(a.num_alloc_retries(), 1);
  EXPECT_EQ(a.num_ooms(), 0);
  EXPECT_EQ(a.num_device_free(), 2);
  EXPECT_EQ(a.segment_count(), 1);
  expect_consistent(a);
}

TEST(CachingAllocator, OutOfMemoryWhenReleasingTheCacheIsNotEnough) {
  auto a = make(40 * MiB);
  ASSERT_TRUE(a.allocate(1, 12 * MiB));
  ASSERT_TRUE(a.allocate(2, 12 * MiB));
  a.free(2);
  // 30 MiB: 24 + 30 > 40; release frees segment 2 (reserved 12 MiB); 12 + 30 = 42 > 40: fails.
  EXPECT_FALSE(a.allocate(3, 30 * MiB));
  EXPECT_FALSE(a.is_live(3));
  EXPECT_EQ(a.allocated(), 12582912);
  EXPECT_EQ(a.reserved(), 12582912);  // the cache stays emptied
  EXPECT_EQ(a.num_ooms(), 1);
  EXPECT_EQ(a.num_alloc_retries(), 1);
  // 28 MiB: 12 + 28 = 40 MiB, exactly the capacity.
  EXPECT_TRUE(a.allocate(4, 28 * MiB));
  EXPECT_EQ(a.reserved(), 41943040);
  expect_consistent(a);
}

TEST(CachingAllocator, ASplitSegmentWithALiveBlockIsNotReleasedOnOom) {
  auto a = make(40 * MiB);
  ASSERT_TRUE(a.allocate(1, 4 * MiB));
  ASSERT_TRUE(a.allocate(2, 4 * MiB));  // same 20 MiB segment
  a.free(2);                            // [4][16 free]: cached but split
  // 30 MiB: 20 + 30 > 40; nothing unsplit to release; 20 + 30 > 40 again: out of memory.
  EXPECT_FALSE(a.allocate(3, 30 * MiB));
  EXPECT_EQ(a.reserved(), 20971520);
  EXPECT_EQ(a.num_device_free(), 0);
  expect_consistent(a);
}

TEST(CachingAllocator, ExpandableSegmentsMapPagesOfOneGrowingSegmentPerPool) {
  auto a = make(100 * MiB, true);
  // Small pool: 2 MiB pages.
  ASSERT_TRUE(a.allocate(1, 1000));
  EXPECT_EQ(a.reserved(), 2097152);
  EXPECT_EQ(a.allocated(), 1024);
  // Large pool: 20 MiB pages at this commit. 12 MiB maps one page; remainder 8 MiB split off
  // (expandable segments split any remainder >= 512).
  ASSERT_TRUE(a.allocate(2, 12 * MiB));
  EXPECT_EQ(a.block_size(2), 12 * MiB);
  EXPECT_EQ(a.reserved(), 2097152 + 20971520);
  // 12 MiB more: the free 8 MiB plus one more page, merged: [12][12][16 free] in 40 MiB mapped.
  ASSERT_TRUE(a.allocate(3, 12 * MiB));
  EXPECT_EQ(a.reserved(), 2097152 + 41943040);
  EXPECT_EQ(a.allocated(), 1024 + 25165824);
  EXPECT_EQ(a.segment_count(), 2);  // one per pool
  const auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_TRUE(snap[0].expandable);
  EXPECT_TRUE(snap[0].small_pool);
  expect_blocks(snap[0], {{1024, true}, {2096128, false}});
  EXPECT_FALSE(snap[1].small_pool);
  expect_blocks(snap[1], {{12 * MiB, true}, {12 * MiB, true}, {16 * MiB, false}});
  expect_consistent(a);
}

TEST(CachingAllocator, ExpandableSegmentsUnmapFreePagesOnOomAndRetry) {
  // Capacity 60 MiB: the large segment reserves address space for 60 + 7.5 MiB = 4 pages of 20 MiB.
  auto a = make(60 * MiB, true);
  ASSERT_TRUE(a.allocate(1, 30 * MiB));  // maps pages 0-1: [30 @0][10 free @30][unmapped 40 @40]
  EXPECT_EQ(a.reserved(), 41943040);
  ASSERT_TRUE(a.allocate(2, 5 * MiB));  // best fit in the 10 MiB: [30][5 @30][5 free @35]
  EXPECT_EQ(a.reserved(), 41943040);
  a.free(1);  // [30 free @0][5 @30][5 free @35][unmapped 40 @40]
  // 35 MiB: no free block fits; 5 MiB @35 + unmapped needs pages 2-3 (40 MiB): 40 + 40 > 60.
  // Release: page 0 of the 30 MiB free block is unmapped (reserved 20 MiB), [10 free @20] stays;
  // the 5 MiB @35 holds no whole page. Retry: 20 + 40 = 60 <= 60.
  ASSERT_TRUE(a.allocate(3, 35 * MiB));
  EXPECT_EQ(a.reserved(), 62914560);
  EXPECT_EQ(a.peak_reserved(), 62914560);
  EXPECT_EQ(a.allocated(), 5242880 + 36700160);
  EXPECT_EQ(a.num_alloc_retries(), 1);
  EXPECT_EQ(a.num_ooms(), 0);
  auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 1u);  // one mapped range: [20 MiB, 80 MiB)
  EXPECT_EQ(snap[0].address, 20 * MiB);  // the first segment's address space starts at 0
  EXPECT_EQ(snap[0].total_size, 62914560);
  expect_blocks(snap[0], {{10 * MiB, false}, {5 * MiB, true}, {35 * MiB, true}, {10 * MiB, false}});
  expect_consistent(a);
  // All freed: everything merges; empty_cache unmaps every page and drops the segment.
  a.free(2);
  a.free(3);
  EXPECT_EQ(a.reserved(), 62914560);
  a.empty_cache();
  EXPECT_EQ(a.reserved(), 0);
  EXPECT_EQ(a.segment_count(), 0);
  expect_consistent(a);
}

TEST(CachingAllocator, ExpandableBestFitCountsTheUnmappedSpaceAfterABlock) {
  auto a = make(200 * MiB, true);
  ASSERT_TRUE(a.allocate(1, 6 * MiB));  // one 20 MiB page: [6][14 free @6][unmapped @20]
  ASSERT_TRUE(a.allocate(2, 9 * MiB));  // [6][9 @6][5 free @15][unmapped @20]
  a.free(1);                            // [6 free @0][9][5 free @15][unmapped]
  // 4 MiB: by size the 5 MiB block comes first, but it can grow into the unmapped space
  // (expandable size 5 + 220 MiB), so get_free_block moves on to the 6 MiB block (expandable
  // size 6 MiB) and splits it: [4][2 free][9][5 free].
  ASSERT_TRUE(a.allocate(3, 4 * MiB));
  const auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  expect_blocks(snap[0], {{4 * MiB, true}, {2 * MiB, false}, {9 * MiB, true}, {5 * MiB, false}});
  EXPECT_EQ(a.reserved(), 20971520);
  expect_consistent(a);
}

TEST(CachingAllocator, PeaksAndTheirReset) {
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(1, 12 * MiB));
  ASSERT_TRUE(a.allocate(2, 12 * MiB));
  a.free(1);
  EXPECT_EQ(a.allocated(), 12582912);
  EXPECT_EQ(a.peak_allocated(), 25165824);
  EXPECT_EQ(a.peak_requested(), 25165824);
  a.reset_peaks();
  EXPECT_EQ(a.peak_allocated(), 12582912);
  EXPECT_EQ(a.peak_reserved(), 25165824);  // both segments still reserved (one cached)
}

// A long random stream in both modes: the counters agree with the segments at every step, the
// peaks bound the values, and once everything is freed empty_cache returns all memory.
TEST(CachingAllocator, RandomStreamStaysConsistent) {
  for (const bool expandable : {false, true}) {
    SCOPED_TRACE(expandable ? "expandable" : "segments");
    auto a = make(512 * MiB, expandable);
    std::mt19937_64 rng(42);
    std::vector<CachingAllocator::RequestId> live;
    CachingAllocator::RequestId next_id = 0;
    for (int step = 0; step < 3000; ++step) {
      if (live.empty() || rng() % 3 != 0) {
        // sizes from 1 B to 48 MiB, most of them small
        const std::int64_t bytes = static_cast<std::int64_t>(rng() % 4 == 0 ? rng() % (48 * MiB) + 1
                                                                            : rng() % (2 * MiB) + 1);
        if (a.allocate(next_id, bytes)) live.push_back(next_id);
        ++next_id;
      } else {
        const std::size_t i = rng() % live.size();
        a.free(live[i]);
        live[i] = live.back();
        live.pop_back();
      }
      ASSERT_LE(a.reserved(), a.capacity());
      ASSERT_LE(a.allocated(), a.reserved());
      ASSERT_LE(a.allocated(), a.peak_allocated());
      ASSERT_LE(a.reserved(), a.peak_reserved());
      if (step % 100 == 0) expect_consistent(a);
    }
    expect_consistent(a);
    for (const auto id : live) a.free(id);
    EXPECT_EQ(a.allocated(), 0);
    a.empty_cache();
    EXPECT_EQ(a.reserved(), 0);
    EXPECT_EQ(a.segment_count(), 0);
  }
}

TEST(CachingAllocator, ZeroBytesAndMisuse) {
  EXPECT_THROW(make(0), std::invalid_argument);
  auto a = make(1024 * MiB);
  ASSERT_TRUE(a.allocate(7, 0));  // no block, as torch's allocate(0)
  EXPECT_TRUE(a.is_live(7));
  EXPECT_EQ(a.block_size(7), 0);
  EXPECT_EQ(a.reserved(), 0);
  EXPECT_THROW(a.allocate(7, 1), std::logic_error);
  a.free(7);
  EXPECT_THROW(a.free(7), std::logic_error);
  EXPECT_THROW(a.allocate(8, -1), std::invalid_argument);
  EXPECT_THROW(a.block_size(8), std::logic_error);
}

}  // namespace
}  // namespace comptrain::sim
