// See Note [The caching allocator] in caching_allocator.h.
#include "cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "strata/error.h"

namespace strata::detail::cuda {

std::string DeviceInterface::streamName(StreamHandle stream) const {
  if (stream == nullptr) return "the default stream";
  char buf[32];
  std::snprintf(buf, sizeof buf, "stream %p", stream);
  return buf;
}

std::string formatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

struct CachingAllocator::Segment {
  void* ptr = nullptr;
  size_t size = 0;
  StreamHandle stream = nullptr;
  bool small = false;
  EventHandle idle_event = nullptr;  // Note [The caching allocator]: see Invariants
};

struct CachingAllocator::Block {
  Segment* segment = nullptr;
  char* ptr = nullptr;
  size_t size = 0;
  size_t requested = 0;
  Block* prev = nullptr;  // the neighbours in the segment, by address
  Block* next = nullptr;
  bool allocated = false;
  int pending_events = 0;
  std::vector<StreamHandle> stream_uses;  // other streams that used it (recordStream)

  Block(Segment* seg, char* p, size_t bytes) : segment(seg), ptr(p), size(bytes) {}
  bool wholeSegment() const { return prev == nullptr && next == nullptr; }
  bool inPool() const { return !allocated && pending_events == 0; }
};

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

size_t CachingAllocator::roundSize(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((nbytes + kMinBlockSize - 1) / kMinBlockSize);
}

size_t CachingAllocator::segmentSize(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceInterface> device) : device_(std::move(device)) {}

CachingAllocator::~CachingAllocator() {
  std::set<Block*> waiting;
  for (auto& [event, block] : pending_) {
    device_->releaseEvent(event);
    waiting.insert(block);
  }
  for (Block* b : waiting) delete b;
  for (auto& [key, pool] : pools_) {
    for (Block* b : pool) delete b;
  }
  for (auto& [ptr, b] : active_) delete b;
  for (Segment* s : segments_) {
    if (s->idle_event != nullptr) device_->releaseEvent(s->idle_event);
    device_->free(s->ptr);
    delete s;
  }
}

void* CachingAllocator::allocate(size_t nbytes, StreamHandle stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  processEvents();
  // A request beyond any device's memory: no rounding that could overflow.
  constexpr size_t kLargest = std::numeric_limits<size_t>::max() / 4;
  if (nbytes > kLargest) throwOutOfMemory(nbytes, stream, /*retried=*/false);
  const size_t size = roundSize(nbytes);
  const bool small = size <= kSmallSize;
  Pool& pool = pools_[{stream, small}];
  Block* block = findFree(pool, size);
  if (block == nullptr) block = adoptIdleSegment(stream, small, size);
  if (block == nullptr) block = newSegment(stream, small, size);
  if (block == nullptr) {
    // Note [The caching allocator]: out of memory, free the cache and retry once.
    ++stats_.cache_flushes;
    releaseCachedSegments();
    // Waiting for the device may have completed the events that held blocks back
    // (record_stream): they are free in this pool now, merged with their neighbours.
    block = findFree(pool, size);
    if (block == nullptr) block = newSegment(stream, small, size);
  }
  if (block == nullptr) throwOutOfMemory(nbytes, stream, /*retried=*/true);

  const size_t rest = block->size - size;
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
    auto* tail = new Block(block->segment, block->ptr + size, rest);
    tail->prev = block;
    tail->next = block->next;
    if (tail->next != nullptr) tail->next->prev = tail;
    block->next = tail;
    block->size = size;
    pool.insert(tail);
  }
  Segment* seg = block->segment;
  if (seg->idle_event != nullptr) {  // new work on the segment: the event says nothing now
    device_->releaseEvent(seg->idle_event);
    seg->idle_event = nullptr;
  }
  block->allocated = true;
  block->requested = nbytes;
  active_.emplace(block->ptr, block);
  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += nbytes;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.active_blocks;
  ++stats_.allocations;
  return block->ptr;
}

// Best fit: the smallest free block of at least size, taken out of the pool.
CachingAllocator::Block* CachingAllocator::findFree(Pool& pool, size_t size) {
  Block key(nullptr, nullptr, size);
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

// A whole free segment of another stream whose last use has finished (its idle
// event completed) moves to stream. A segment without an event gets one now, so
// that a later request may take it.
CachingAllocator::Block* CachingAllocator::adoptIdleSegment(StreamHandle stream, bool small, size_t size) {
  Pool* best_pool = nullptr;
  Block* best = nullptr;
  for (auto& [key, pool] : pools_) {
    if (key.first == stream || key.second != small) continue;
    Block probe(nullptr, nullptr, size);
    for (auto it = pool.lower_bound(&probe); it != pool.end(); ++it) {
      Block* b = *it;
      if (!b->wholeSegment()) continue;
      Segment* seg = b->segment;
      if (seg->idle_event == nullptr) {
        seg->idle_event = device_->recordEvent(seg->stream);
        continue;
      }
      if (!device_->queryEvent(seg->idle_event)) continue;
      if (best == nullptr || b->size < best->size) {
        best = b;
        best_pool = &pool;
      }
      break;  // the pool is ordered by size: later ones are larger
    }
  }
  if (best == nullptr) return nullptr;
  best_pool->erase(best);
  Segment* seg = best->segment;
  device_->releaseEvent(seg->idle_event);
  seg->idle_event = nullptr;
  seg->stream = stream;
  return best;
}

CachingAllocator::Block* CachingAllocator::newSegment(StreamHandle stream, bool small, size_t size) {
  const size_t bytes = segmentSize(size);
  void* p = device_->malloc(bytes);
  if (p == nullptr) return nullptr;
  auto* seg = new Segment{p, bytes, stream, small};
  segments_.push_back(seg);
  ++stats_.device_mallocs;
  ++stats_.segments;
  stats_.reserved_bytes += bytes;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return new Block(seg, static_cast<char*>(p), bytes);
}

void CachingAllocator::free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  if (it == active_.end()) {
    std::fprintf(stderr, "strata: internal error: the %s caching allocator was asked to free %p, which it did not "
                 "hand out\n", device_->name().c_str(), ptr);
    std::abort();
  }
  Block* b = it->second;
  active_.erase(it);
  b->allocated = false;
  stats_.allocated_bytes -= b->size;
  stats_.requested_bytes -= b->requested;
  --stats_.active_blocks;
  if (!b->stream_uses.empty()) {
    // Other streams used it: it waits for their work (Note [The caching allocator]).
    for (StreamHandle s : b->stream_uses) {
      EventHandle e = nullptr;
      try {
        e = device_->recordEvent(s);
      } catch (...) {
        // No event (the runtime is shutting down, say): wait for the device instead.
        try {
          device_->synchronize();
        } catch (...) {
        }
        continue;
      }
      pending_.emplace_back(e, b);
      ++b->pending_events;
    }
    b->stream_uses.clear();
    if (b->pending_events > 0) return;
  }
  toPool(b);
}

void CachingAllocator::recordStream(void* ptr, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  STRATA_CHECK(it != active_.end(), Value, "record_stream: ", ptr, " is not memory the ", device_->name(),
               " caching allocator handed out (or it was freed)");
  Block* b = it->second;
  if (stream == b->segment->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
}

// A block back in its segment stream's pool, merged with free neighbours.
void CachingAllocator::toPool(Block* b) {
  Pool& pool = pools_[{b->segment->stream, b->segment->small}];
  if (Block* p = b->prev; p != nullptr && p->inPool()) {
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (p->next != nullptr) p->next->prev = p;
    delete b;
    b = p;
  }
  if (Block* n = b->next; n != nullptr && n->inPool()) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (b->next != nullptr) b->next->prev = b;
    delete n;
  }
  pool.insert(b);
}

// Blocks whose other streams have finished with them go back to their pools.
void CachingAllocator::processEvents() {
  if (pending_.empty()) return;
  std::vector<std::pair<EventHandle, Block*>> still;
  for (auto& [event, block] : pending_) {
    bool done = false;
    try {
      done = device_->queryEvent(event);
    } catch (...) {
      done = false;
    }
    if (!done) {
      still.emplace_back(event, block);
      continue;
    }
    device_->releaseEvent(event);
    if (--block->pending_events == 0) toPool(block);
  }
  pending_ = std::move(still);
}

// Waits for the device, then frees every whole free segment.
void CachingAllocator::releaseCachedSegments() {
  device_->synchronize();
  processEvents();
  for (auto& [key, pool] : pools_) {
    for (auto it = pool.begin(); it != pool.end();) {
      Block* b = *it;
      if (!b->wholeSegment()) {
        ++it;
        continue;
      }
      it = pool.erase(it);
      Segment* seg = b->segment;
      if (seg->idle_event != nullptr) device_->releaseEvent(seg->idle_event);
      device_->free(seg->ptr);
      ++stats_.device_frees;
      --stats_.segments;
      stats_.reserved_bytes -= seg->size;
      segments_.erase(std::find(segments_.begin(), segments_.end(), seg));
      delete seg;
      delete b;
    }
  }
}

void CachingAllocator::emptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  releaseCachedSegments();
}

void CachingAllocator::throwOutOfMemory(size_t nbytes, StreamHandle stream, bool retried) {
  ++stats_.ooms;
  const auto [free_bytes, total_bytes] = device_->memoryInfo();
  uint64_t cached = 0;
  for (const auto& [key, pool] : pools_) {
    for (const Block* b : pool) cached += b->size;
  }
  std::string device_state =
      total_bytes == 0 ? std::string()
                       : "the device has " + formatBytes(free_bytes) + " free of " + formatBytes(total_bytes) + "; ";
  STRATA_FAIL(Device, device_->name(), " out of memory: tried to allocate ", formatBytes(nbytes), " (", nbytes,
              " bytes) on ", device_->streamName(stream), "; ", device_state, "this process's caching allocator holds ",
              formatBytes(stats_.reserved_bytes), " reserved in ", stats_.segments, " segment",
              stats_.segments == 1 ? "" : "s", ", of which ", formatBytes(stats_.allocated_bytes), " is allocated to ",
              stats_.active_blocks, " live block", stats_.active_blocks == 1 ? "" : "s", " and ", formatBytes(cached),
              " is cached free",
              retried ? " in pieces of segments still in use (whole free segments were returned to the device and "
                        "the allocation retried)"
                      : "",
              ". Free tensors you no longer need, or allocate less at once");
}

strata::cuda::MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::resetPeakStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

}  // namespace strata::detail::cuda

namespace strata::cuda {

std::string MemoryStats::str() const {
  using detail::cuda::formatBytes;
  auto plural = [](uint64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  return "allocated " + formatBytes(allocated_bytes) + " (peak " + formatBytes(peak_allocated_bytes) + "), reserved " +
         formatBytes(reserved_bytes) + " (peak " + formatBytes(peak_reserved_bytes) + ") in " +
         plural(segments, "segment", "segments") + "; " + plural(allocations, "allocation", "allocations") + ", " +
         std::to_string(device_mallocs) + " cudaMalloc, " + std::to_string(device_frees) + " cudaFree, " +
         std::to_string(ooms) + " out of memory";
}

}  // namespace strata::cuda
