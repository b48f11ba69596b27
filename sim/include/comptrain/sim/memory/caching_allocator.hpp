#pragma once
// A model of PyTorch's CUDA caching allocator (DeviceCachingAllocator in
// c10/cuda/CUDACachingAllocator.cpp), fed an allocation stream. It answers what
// torch.cuda.memory_allocated / max_memory_allocated (rounded blocks in use) and
// memory_reserved / max_memory_reserved (segments held from cudaMalloc, cached free blocks and
// fragmentation included) would report, and whether PyTorch would raise out-of-memory.
//
// Source: pytorch/pytorch, c10/cuda/CUDACachingAllocator.cpp at commit
// eb42ad6eca0ce61e7c581212b4bf32f991425571 (read from the public code index; every constant
// below names the function it comes from in that file at that commit).
//
// What is modelled (one device, one stream, the default CUDAAllocatorConfig):
// - round_size: requests below kMinBlockSize become kMinBlockSize, others are rounded up to a
//   multiple of kMinBlockSize. A request of 0 bytes allocates nothing (NativeCachingAllocator::
//   allocate skips malloc for size 0) but its id is live until freed.
// - get_pool: a rounded size <= kSmallSize goes to the small pool, larger ones to the large pool.
// - get_allocation_size: a new segment for the small pool is kSmallBuffer; for the large pool it
//   is kLargeBuffer below kMinLargeAlloc, else the size rounded up to kRoundLarge.
// - get_free_block: best fit in the pool's cached free blocks ordered by (size, address).
// - should_split: the small pool (or any pool with expandable segments) splits when the
//   remainder is >= kMinBlockSize; the large pool when the remainder is > kSmallSize. An unsplit
//   block counts whole in allocated().
// - free_block / try_merge_blocks: a freed block merges with its free neighbours in the same
//   segment (split chain), never across segments, and stays cached (reserved() is unchanged).
// - malloc: a request no cached block serves calls alloc_block; if the new segment would take
//   reserved() beyond the capacity (cudaMalloc fails), release_cached_blocks frees every cached
//   unsplit segment (both pools; with expandable segments it unmaps every fully free page) and
//   alloc_block is tried once more; if that fails too, allocate() returns false (PyTorch's
//   OutOfMemoryError). The cache stays emptied after a failed request, as in PyTorch.
// - expandable_segments:True: one segment per pool that reserves virtual address space for
//   capacity + capacity/8 (ExpandableSegment's constructor, with totalGlobalMem = the capacity)
//   and maps physical pages as needed: kSmallBuffer (2 MiB) pages for the small pool and
//   kLargeBuffer (20 MiB) pages for the large pool at this commit (find_expandable_block).
//   reserved() counts mapped pages. find_expandable_block, map_block, unmap_block and
//   get_free_block's "expandable size" preference are followed; a page mapping that would pass
//   the capacity fails like cuMemCreate's CUDA_ERROR_OUT_OF_MEMORY.
// - empty_cache() is torch.cuda.empty_cache (release_cached_blocks).
//
// What is left out:
// - roundup_power2_divisions (the power-of-two division rounding option): off, as by default.
// - max_split_size_mb (oversize blocks, release_available_cached_blocks): its default
//   (unlimited) is modelled, where release_available_cached_blocks does nothing.
// - garbage_collection_threshold and set_per_process_memory_fraction: not modelled; the
//   capacity is the memory cudaMalloc can give the allocator (the device's free memory after
//   the CUDA context and other processes).
// - Streams: a request names the stream it is made on (0, the default, when a model has one).
//   A block belongs to the stream of the segment it was carved from: get_free_block searches
//   the free blocks of the request's stream only (BlockComparatorSize orders blocks by stream
//   first), find_expandable_block the expandable segments of that stream only (one per stream
//   and pool), and a new segment belongs to the request's stream. So memory one stream freed is
//   reserved but unusable by another, the inter-stream fragmentation FSDP2's side streams cause.
//   release_cached_blocks releases every stream's free segments. recordStream and the CUDA events
//   that delay a cross-stream free until the other stream's work is done are left out: a free is
//   immediate (the caller frees a block once every stream that uses it is done with it).
// - CUDA graph private pools, FreeCudaMemoryCallbacks (CUDA IPC), IPC of expandable segments,
//   expandable segments turned on or off during a run.
// - Addresses: cudaMalloc's addresses are not predictable; segments get consecutive virtual
//   addresses from 0 in the order they are created. They only break ties between free blocks
//   of equal size (lower address first), as pointers do in PyTorch.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace comptrain::sim {

struct CachingAllocatorOptions {
  // Bytes the allocator can reserve in all (cudaMalloc / cuMemCreate fail beyond it). > 0.
  std::int64_t capacity_bytes = 0;
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
  bool expandable_segments = false;
};

class CachingAllocator {
 public:
  // Identifies one allocation of the stream; the memory tracker passes its models::BufferId.
  using RequestId = std::size_t;
  // A CUDA stream (cudaStream_t in PyTorch); 0 is the one a single-stream model uses.
  using StreamId = int;

  // Constants of c10/cuda/CUDACachingAllocator.cpp @ eb42ad6eca0ce61e7c581212b4bf32f991425571,
  // file scope of namespace Native (used by round_size, get_pool, should_split,
  // get_allocation_size), with PyTorch's own comments:
  // "all sizes are rounded to at least 512 bytes"
  static constexpr std::int64_t kMinBlockSize = 512;
  // "largest 'small' allocation is 1 MiB"
  static constexpr std::int64_t kSmallSize = 1048576;
  // "'small' allocations are packed in 2 MiB blocks"
  static constexpr std::int64_t kSmallBuffer = 2097152;
  // "allocations between 1 and 10 MiB may use kLargeBuffer"
  static constexpr std::int64_t kMinLargeAlloc = 10485760;
  // "round up large allocations to 2 MiB"
  static constexpr std::int64_t kRoundLarge = 2097152;
  // Same file and commit, namespace cuda::CUDACachingAllocator (outside Native):
  // "'large' allocations may be packed in 20 MiB blocks"
  static constexpr std::int64_t kLargeBuffer = 20971520;
  // Same file and commit, find_expandable_block: `segment_size = pool->is_small ? kSmallBuffer
  // : kLargeBuffer` is the page an expandable segment maps at a time.
  static constexpr std::int64_t kExpandableSmallPage = kSmallBuffer;
  static constexpr std::int64_t kExpandableLargePage = kLargeBuffer;

  struct BlockInfo {
    std::int64_t address = 0;
    std::int64_t size = 0;
    bool allocated = false;
  };
  // One segment as torch.cuda.memory_snapshot() reports it: a cudaMalloc'd segment, or one
  // contiguous mapped range of an expandable segment.
  struct SegmentInfo {
    std::int64_t address = 0;
    std::int64_t total_size = 0;      // bytes reserved
    std::int64_t allocated_size = 0;  // bytes in allocated blocks
    bool small_pool = false;
    bool expandable = false;
    StreamId stream = 0;
    std::vector<BlockInfo> blocks;  // in address order
  };

  // std::invalid_argument when the capacity is not positive.
  explicit CachingAllocator(CachingAllocatorOptions options);
  ~CachingAllocator();
  CachingAllocator(CachingAllocator&&) noexcept;
  CachingAllocator& operator=(CachingAllocator&&) noexcept;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // torch's malloc on `stream`: true when served; false when PyTorch would raise out-of-memory
  // (nothing is allocated, but cached segments may have been released). std::logic_error when
  // `id` is live, std::invalid_argument when bytes < 0.
  bool allocate(RequestId id, std::int64_t bytes, StreamId stream = 0);
  // torch's free: the block goes back to the cache. std::logic_error when `id` is not live.
  void free(RequestId id);
  // torch.cuda.empty_cache(): releases every cached segment with no allocated block (with
  // expandable segments, unmaps every fully free page).
  void empty_cache();
  // torch.cuda.reset_peak_memory_stats(): the peaks become the current values.
  void reset_peaks();

  std::int64_t capacity() const;
  std::int64_t allocated() const;       // memory_allocated: rounded blocks in use
  std::int64_t reserved() const;        // memory_reserved: segments (mapped pages)
  std::int64_t requested() const;       // bytes asked for by the live requests
  std::int64_t peak_allocated() const;  // max_memory_allocated
  std::int64_t peak_reserved() const;   // max_memory_reserved
  std::int64_t peak_requested() const;

  bool is_live(RequestId id) const;
  std::int64_t block_size(RequestId id) const;  // the block a live request holds; 0 for 0 bytes

  // memory_stats() counters: "num_alloc_retries", "num_ooms", "num_device_alloc" (cudaMalloc
  // calls and page-range maps), "num_device_free" (cudaFree calls and page-range unmaps).
  std::int64_t num_alloc_retries() const;
  std::int64_t num_ooms() const;
  std::int64_t num_device_alloc() const;
  std::int64_t num_device_free() const;
  // Segments held now: cudaMalloc'd ones, plus expandable segments (each counted once).
  std::int64_t segment_count() const;

  // memory_snapshot(): segments in address order.
  std::vector<SegmentInfo> snapshot() const;

  // round_size (default config: no power-of-two divisions).
  static std::int64_t round_size(std::int64_t bytes);
  // get_allocation_size: the segment cudaMalloc'd for a rounded request no cached block serves.
  static std::int64_t allocation_size(std::int64_t rounded_bytes);
  // get_pool: whether a rounded request goes to the small pool.
  static bool is_small_request(std::int64_t rounded_bytes) { return rounded_bytes <= kSmallSize; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace comptrain::sim
