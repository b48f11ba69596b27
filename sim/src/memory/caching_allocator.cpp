#include "comptrain/sim/memory/caching_allocator.hpp"

// Function names in comments are those of DeviceCachingAllocator in
// c10/cuda/CUDACachingAllocator.cpp @ eb42ad6eca0ce61e7c581212b4bf32f991425571.

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace comptrain::sim {

namespace {

struct ExpandableSegment;
struct BlockPool;

struct Block {
  int stream = 0;  // the stream whose segment the block is carved from
  std::int64_t address = 0;
  std::int64_t size = 0;
  std::int64_t requested = 0;
  BlockPool* pool = nullptr;
  ExpandableSegment* expandable = nullptr;
  bool allocated = false;
  bool mapped = true;  // false only for the unmapped ranges of an expandable segment
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// BlockComparatorSize: stream, then size, then address.
struct BySizeAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->address < b->address;
  }
};
// BlockComparatorAddress: stream, then address.
struct ByAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    return a->address < b->address;
  }
};

struct BlockPool {
  explicit BlockPool(bool small) : is_small(small) {}
  std::set<Block*, BySizeAddress> blocks;  // cached free (mapped) blocks
  std::set<Block*, ByAddress> unmapped;    // unmapped ranges of expandable segments
  bool is_small;
};

struct ExpandableSegment {
  std::int64_t base = 0;
  std::int64_t page = 0;       // segment_size_
  std::int64_t max_pages = 0;  // max_handles_
  std::int64_t size() const { return page * max_pages; }
  std::int64_t pages_up(std::int64_t bytes) const { return (bytes + page - 1) / page; }  // numSegments
};

std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return multiple * ((value + multiple - 1) / multiple);
}

}  // namespace

struct CachingAllocator::Impl {
  CachingAllocatorOptions options;
  BlockPool large_blocks{false};
  BlockPool small_blocks{true};
  std::unordered_map<RequestId, Block*> live;  // nullptr for a 0-byte request
  std::unordered_set<Block*> all_blocks;       // owns every Block
  std::vector<std::unique_ptr<ExpandableSegment>> expandable_segments;
  std::int64_t next_address = 0;

  std::int64_t allocated = 0, reserved = 0, requested = 0;
  std::int64_t peak_allocated = 0, peak_reserved = 0, peak_requested = 0;
  std::int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
  std::int64_t cuda_segments = 0;

  explicit Impl(CachingAllocatorOptions o) : options(o) {}
  ~Impl() {
    for (Block* b : all_blocks) delete b;
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Block* new_block(int stream, std::int64_t address, std::int64_t size, BlockPool* pool, ExpandableSegment* es,
                   bool mapped) {
    auto* b = new Block;
    b->stream = stream;
    b->address = address;
    b->size = size;
    b->pool = pool;
    b->expandable = es;
    b->mapped = mapped;
    all_blocks.insert(b);
    return b;
  }
  void delete_block(Block* b) {
    all_blocks.erase(b);
    delete b;
  }

  // increase_stat / decrease_stat on the aggregate byte stats.
  void add_allocated(std::int64_t block_bytes, std::int64_t request_bytes) {
    allocated += block_bytes;
    requested += request_bytes;
    peak_allocated = std::max(peak_allocated, allocated);
    peak_requested = std::max(peak_requested, requested);
  }
  void add_reserved(std::int64_t bytes) {
    reserved += bytes;
    peak_reserved = std::max(peak_reserved, reserved);
  }

  static void splice(Block* block, Block* before, Block* after) {
    if (before) before->next = block;
    block->prev = before;
    if (after) after->prev = block;
    block->next = after;
  }

  // malloc
  bool malloc(RequestId id, std::int64_t bytes, int stream) {
    if (live.contains(id)) {
      throw std::logic_error("caching allocator: request " + std::to_string(id) + " allocated twice");
    }
    if (bytes < 0) {
      throw std::invalid_argument("caching allocator: request " + std::to_string(id) +
                                  " of a negative size (" + std::to_string(bytes) + " B)");
    }
    if (bytes == 0) {  // NativeCachingAllocator::allocate: no malloc for size 0
      live.emplace(id, nullptr);
      return true;
    }
    const std::int64_t size = round_size(bytes);
    BlockPool& pool = is_small_request(size) ? small_blocks : large_blocks;  // get_pool
    const std::int64_t alloc_size = allocation_size(size);                   // get_allocation_size

    Block* block = get_free_block(pool, stream, size);
    if (!block) {
      // alloc_block || (release_available_cached_blocks && alloc_block) || (release_cached_blocks
      // && alloc_block(isRetry)). release_available_cached_blocks returns false when
      // max_split_size is unlimited (the default), so it is left out.
      block = alloc_block(pool, stream, size, alloc_size, false);
      if (!block) {
        release_cached_blocks();
        block = alloc_block(pool, stream, size, alloc_size, true);
      }
    }
    if (!block) {
      ++num_ooms;
      return false;
    }
    live.emplace(id, alloc_found_block(block, size, bytes, should_split(*block, size)));
    return true;
  }

  // should_split (max_split_size unlimited: `size < max_split_size` always holds).
  bool should_split(const Block& block, std::int64_t size) const {
    const std::int64_t remaining = block.size - size;
    if (block.pool->is_small || options.expandable_segments) return remaining >= kMinBlockSize;
    return remaining > kSmallSize;
  }

  // get_free_block: best fit among the stream's free blocks by (size, address); the block leaves
  // the free set.
  Block* get_free_block(BlockPool& pool, int stream, std::int64_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    key.address = std::numeric_limits<std::int64_t>::min();
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
    if ((*it)->expandable && options.expandable_segments) {
      // A block followed by unmapped space can grow into it: best fit compares those sizes.
      auto expandable_size = [](const Block* b) {
        return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
      };
      auto next = std::next(it);
      while ((*it)->expandable && next != pool.blocks.end() && (*next)->stream == stream &&
             expandable_size(*next) < expandable_size(*it)) {
        it = next++;
      }
    }
    Block* block = *it;
    pool.blocks.erase(it);
    return block;
  }

  // alloc_block: a new segment (cudaMalloc) or new pages of an expandable segment. The
  // returned block is in no free set.
  Block* alloc_block(BlockPool& pool, int stream, std::int64_t size, std::int64_t alloc_size, bool is_retry) {
    if (is_retry) ++num_alloc_retries;
    if (options.expandable_segments) return try_allocate_expandable_block(pool, stream, size);
    if (reserved + alloc_size > options.capacity_bytes) return nullptr;  // cudaErrorMemoryAllocation
    Block* block = new_block(stream, next_address, alloc_size, &pool, nullptr, true);
    next_address += alloc_size;
    add_reserved(alloc_size);
    ++cuda_segments;
    ++num_device_alloc;
    return block;
  }

  // alloc_found_block: split off the remainder (back to the free set) and mark allocated.
  Block* alloc_found_block(Block* block, std::int64_t size, std::int64_t orig_size, bool split) {
    if (split) {
      Block* remaining = block;
      block = new_block(remaining->stream, remaining->address, size, remaining->pool, remaining->expandable, true);
      splice(block, remaining->prev, remaining);
      remaining->address += size;
      remaining->size -= size;
      remaining->pool->blocks.insert(remaining);
    }
    block->allocated = true;
    block->requested = orig_size;
    add_allocated(block->size, orig_size);
    return block;
  }

  void free(RequestId id) {
    auto it = live.find(id);
    if (it == live.end()) {
      throw std::logic_error("caching allocator: request " + std::to_string(id) + " freed but not live");
    }
    Block* block = it->second;
    live.erase(it);
    if (!block) return;
    block->allocated = false;
    allocated -= block->size;
    requested -= block->requested;
    block->requested = 0;
    free_block(block);
  }

  // free_block: merge with free neighbours of the same segment, then cache.
  void free_block(Block* block) {
    try_merge_blocks(block, block->prev);
    try_merge_blocks(block, block->next);
    block->pool->blocks.insert(block);
  }

  // try_merge_blocks: `src` (a neighbour of `dst` in its segment) joins `dst` when free and in
  // the same mapped state. Neither may be in a free set while keys change: `dst` is not; `src`
  // is taken out here.
  std::int64_t try_merge_blocks(Block* dst, Block* src) {
    if (!src || src->allocated || dst->mapped != src->mapped) return 0;
    if (dst->prev == src) {  // [src dst]
      dst->address = src->address;
      dst->prev = src->prev;
      if (dst->prev) dst->prev->next = dst;
    } else {  // [dst src]
      dst->next = src->next;
      if (dst->next) dst->next->prev = dst;
    }
    const std::int64_t subsumed = src->size;
    dst->size += subsumed;
    if (src->mapped) {
      src->pool->blocks.erase(src);
    } else {
      src->pool->unmapped.erase(src);
    }
    delete_block(src);
    return subsumed;
  }

  // release_cached_blocks (one stream: no events to synchronize first).
  void release_cached_blocks() {
    release_blocks(large_blocks);
    release_blocks(small_blocks);
  }

  // release_blocks: cudaFree every unsplit free block; unmap the free pages of expandable ones.
  void release_blocks(BlockPool& pool) {
    std::vector<Block*> to_unmap;
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      Block* block = *it;
      ++it;
      if (block->expandable) {
        to_unmap.push_back(block);
      } else if (!block->is_split()) {
        release_block(block);
      }
    }
    for (Block* block : to_unmap) {
      unmap_block(block);
      if (!block->is_split() && !block->mapped) release_expandable_segment(block);
    }
  }

  // release_block: cudaFree of a whole segment.
  void release_block(Block* block) {
    ++num_device_free;
    reserved -= block->size;
    --cuda_segments;
    block->pool->blocks.erase(block);
    delete_block(block);
  }

  // unmap_block: unmaps the whole pages inside a free block of an expandable segment.
  void unmap_block(Block* block) {
    const ExpandableSegment& es = *block->expandable;
    const std::int64_t begin = es.pages_up(block->address - es.base);            // segmentRight
    const std::int64_t end = (block->address + block->size - es.base) / es.page;  // segmentLeft
    if (begin >= end) return;
    const std::int64_t unmapped_address = es.base + begin * es.page;
    const std::int64_t unmapped_size = (end - begin) * es.page;
    BlockPool& pool = *block->pool;
    pool.blocks.erase(block);

    const std::int64_t before_size = unmapped_address - block->address;
    if (before_size > 0) {
      Block* before_free = new_block(block->stream, block->address, before_size, &pool, block->expandable, true);
      splice(before_free, block->prev, block);
      pool.blocks.insert(before_free);
    }
    const std::int64_t after_size = block->size - (before_size + unmapped_size);
    if (after_size > 0) {
      Block* after_free =
          new_block(block->stream, unmapped_address + unmapped_size, after_size, &pool, block->expandable, true);
      splice(after_free, block, block->next);
      pool.blocks.insert(after_free);
    }
    block->address = unmapped_address;
    block->size = unmapped_size;
    block->mapped = false;
    try_merge_blocks(block, block->prev);
    try_merge_blocks(block, block->next);
    pool.unmapped.insert(block);

    reserved -= unmapped_size;
    ++num_device_free;
  }

  // release_expandable_segment: the segment is one unmapped block.
  void release_expandable_segment(Block* block) {
    ExpandableSegment* es = block->expandable;
    block->pool->unmapped.erase(block);
    delete_block(block);
    std::erase_if(expandable_segments,
                  [es](const std::unique_ptr<ExpandableSegment>& s) { return s.get() == es; });
  }

  // find_expandable_block: the lowest address of the stream's expandable segments where free and
  // unmapped space together hold `size`, or a new expandable segment for the stream.
  Block* find_expandable_block(BlockPool& pool, int stream, std::int64_t size) {
    auto allocatable = [](const Block* b) { return b != nullptr && !b->allocated; };
    auto has_available_address_space = [&](const Block* b) {
      std::int64_t bytes = 0;
      while (bytes < size && allocatable(b)) {
        bytes += b->size;
        b = b->next;
      }
      return bytes >= size;
    };
    Block key;
    key.stream = stream;
    key.address = std::numeric_limits<std::int64_t>::min();
    for (auto it = pool.unmapped.lower_bound(&key); it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
      Block* c = *it;
      if (allocatable(c->prev)) c = c->prev;
      if (has_available_address_space(c)) return c;
    }
    // ExpandableSegment's constructor: address space for totalGlobalMem + totalGlobalMem / 8
    // in pages of segment_size_ (kSmallBuffer or kLargeBuffer, find_expandable_block).
    auto es = std::make_unique<ExpandableSegment>();
    es->page = pool.is_small ? kExpandableSmallPage : kExpandableLargePage;
    es->max_pages = es->pages_up(options.capacity_bytes + options.capacity_bytes / 8);
    es->base = next_address;
    next_address += es->size();
    Block* candidate = new_block(stream, es->base, es->size(), &pool, es.get(), false);
    pool.unmapped.insert(candidate);
    expandable_segments.push_back(std::move(es));
    return candidate;
  }

  // map_block: maps the pages covering [address, address + size) of an unmapped block; the
  // unmapped rest stays a block of its own. False when the pages exceed the capacity
  // (cuMemCreate's CUDA_ERROR_OUT_OF_MEMORY: ExpandableSegment::map releases what it created).
  bool map_block(Block* to_map, std::int64_t size) {
    const ExpandableSegment& es = *to_map->expandable;
    const std::int64_t begin = (to_map->address - es.base) / es.page;       // segmentLeft
    const std::int64_t end = es.pages_up(to_map->address + size - es.base);  // segmentRight
    const std::int64_t mapped_size = (end - begin) * es.page;
    if (mapped_size == 0 || reserved + mapped_size > options.capacity_bytes) return false;
    BlockPool& pool = *to_map->pool;
    pool.unmapped.erase(to_map);
    to_map->mapped = true;
    if (mapped_size < to_map->size) {
      Block* remaining = new_block(to_map->stream, to_map->address + mapped_size, to_map->size - mapped_size,
                                   &pool, to_map->expandable, false);
      splice(remaining, to_map, to_map->next);
      pool.unmapped.insert(remaining);
      to_map->size = mapped_size;
    }
    try_merge_blocks(to_map, to_map->prev);
    try_merge_blocks(to_map, to_map->next);
    pool.blocks.insert(to_map);
    add_reserved(mapped_size);
    ++num_device_alloc;
    return true;
  }

  // try_allocate_expandable_block
  Block* try_allocate_expandable_block(BlockPool& pool, int stream, std::int64_t size) {
    Block* candidate = find_expandable_block(pool, stream, size);
    if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, size))) return nullptr;
    while (candidate->size < size) {
      // free -> unmapped -> ...: map part of the unmapped block, which merges with the free one
      const std::int64_t remaining = size - candidate->size;
      Block* new_candidate = candidate->next;
      if (!map_block(new_candidate, std::min(remaining, new_candidate->size))) return nullptr;
      candidate = new_candidate;
    }
    pool.blocks.erase(candidate);
    return candidate;
  }

  std::vector<SegmentInfo> snapshot() const {
    std::vector<const Block*> heads;
    for (const Block* b : all_blocks) {
      if (!b->mapped) continue;
      // For expandable segments, one segment per contiguous mapped range (as snapshot() does).
      if (b->prev == nullptr || (b->expandable && !b->prev->mapped)) heads.push_back(b);
    }
    std::sort(heads.begin(), heads.end(),
              [](const Block* a, const Block* b) { return a->address < b->address; });
    std::vector<SegmentInfo> out;
    for (const Block* head : heads) {
      SegmentInfo s;
      s.address = head->address;
      s.small_pool = head->pool->is_small;
      s.expandable = head->expandable != nullptr;
      s.stream = head->stream;
      for (const Block* b = head; b != nullptr && b->mapped; b = b->next) {
        s.blocks.push_back({b->address, b->size, b->allocated});
        s.total_size += b->size;
        if (b->allocated) s.allocated_size += b->size;
      }
      out.push_back(std::move(s));
    }
    return out;
  }
};

CachingAllocator::CachingAllocator(CachingAllocatorOptions options) {
  if (options.capacity_bytes <= 0) {
    throw std::invalid_argument("caching allocator: the capacity must be positive, not " +
                                std::to_string(options.capacity_bytes) + " B");
  }
  impl_ = std::make_unique<Impl>(options);
}
CachingAllocator::~CachingAllocator() = default;
CachingAllocator::CachingAllocator(CachingAllocator&&) noexcept = default;
CachingAllocator& CachingAllocator::operator=(CachingAllocator&&) noexcept = default;

bool CachingAllocator::allocate(RequestId id, std::int64_t bytes, StreamId stream) { return impl_->malloc(id, bytes, stream); }
void CachingAllocator::free(RequestId id) { impl_->free(id); }
void CachingAllocator::empty_cache() { impl_->release_cached_blocks(); }
void CachingAllocator::reset_peaks() {
  impl_->peak_allocated = impl_->allocated;
  impl_->peak_reserved = impl_->reserved;
  impl_->peak_requested = impl_->requested;
}

std::int64_t CachingAllocator::capacity() const { return impl_->options.capacity_bytes; }
std::int64_t CachingAllocator::allocated() const { return impl_->allocated; }
std::int64_t CachingAllocator::reserved() const { return impl_->reserved; }
std::int64_t CachingAllocator::requested() const { return impl_->requested; }
std::int64_t CachingAllocator::peak_allocated() const { return impl_->peak_allocated; }
std::int64_t CachingAllocator::peak_reserved() const { return impl_->peak_reserved; }
std::int64_t CachingAllocator::peak_requested() const { return impl_->peak_requested; }

bool CachingAllocator::is_live(RequestId id) const { return impl_->live.contains(id); }
std::int64_t CachingAllocator::block_size(RequestId id) const {
  auto it = impl_->live.find(id);
  if (it == impl_->live.end()) {
    throw std::logic_error("caching allocator: request " + std::to_string(id) + " is not live");
  }
  return it->second ? it->second->size : 0;
}

std::int64_t CachingAllocator::num_alloc_retries() const { return impl_->num_alloc_retries; }
std::int64_t CachingAllocator::num_ooms() const { return impl_->num_ooms; }
std::int64_t CachingAllocator::num_device_alloc() const { return impl_->num_device_alloc; }
std::int64_t CachingAllocator::num_device_free() const { return impl_->num_device_free; }
std::int64_t CachingAllocator::segment_count() const {
  return impl_->cuda_segments + static_cast<std::int64_t>(impl_->expandable_segments.size());
}

std::vector<CachingAllocator::SegmentInfo> CachingAllocator::snapshot() const {
  return impl_->snapshot();
}

// round_size with roundup_power2_divisions off (the default).
std::int64_t CachingAllocator::round_size(std::int64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return round_up(bytes, kMinBlockSize);
}

// get_allocation_size
std::int64_t CachingAllocator::allocation_size(std::int64_t rounded_bytes) {
  if (rounded_bytes <= kSmallSize) return kSmallBuffer;
  if (rounded_bytes < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded_bytes, kRoundLarge);
}

}  // namespace comptrain::sim
