// Internal: the caching device allocator's bookkeeping, in plain C++ over a small
// DeviceInterface. The CUDA backend (cuda_backend.cc) gives it a device that calls
// cudaMalloc, cudaFree and CUDA events; the tests give it a fake device that hands
// out host memory and whose events complete when the test says so.
//
// Note [The caching allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's CUDACachingAllocator is the model. cudaMalloc and cudaFree are slow
// (tens of microseconds, and cudaFree synchronizes the device), so memory a tensor
// gives back is kept and handed to the next request that fits.
//
// - Sizes. A request is rounded up to a multiple of 512 bytes. Requests of at most
//   1 MiB are "small" and served from 2 MiB segments; larger ones are "large" and
//   served from 20 MiB segments when under 10 MiB, else from a segment of their
//   own size rounded up to 2 MiB. Small and large blocks never share a segment.
// - Blocks and segments. A segment is one cudaMalloc. It is cut into blocks that
//   tile it in address order (Block::prev/next). A free block larger than a request
//   is split when the rest is worth keeping (small: at least 512 bytes; large: more
//   than 1 MiB); a freed block merges with free neighbours, so a segment whose
//   blocks are all free is one block again.
// - Streams. Every segment belongs to one stream, and its free blocks wait in that
//   stream's pool. A block freed by a tensor is at once reusable on its own stream:
//   work queued there later runs after the work that used it. Another stream may
//   take memory only as a whole free segment, and only once an event recorded on
//   the owning stream after the segment's last use has completed (Segment::
//   idle_event). That event is recorded the first time another stream asks, not on
//   every free, so a single-stream workload records no event at all.
// - Other streams' use of a block (record_stream). Each such stream gets an event
//   when the block is freed, and the block returns to its pool only once they have
//   all completed (checked at the start of every allocation).
// - Out of memory. When the device refuses a new segment, the allocator waits for
//   the device, frees every whole free segment it caches, and tries once more. If
//   that fails too it throws Error(Device) naming the request and the allocator's
//   state; it never aborts.
//
// Invariants (under mu_):
// - a block is in exactly one of: active_ (handed out), its segment stream's pool
//   (free), or waiting on pending_events > 0 (freed, other streams still working);
// - no two adjacent blocks of a segment are both in a pool (they would be merged);
// - segment->idle_event, when set, was recorded on segment->stream after every use
//   of the segment's memory was queued: it is dropped whenever a block of the
//   segment is handed out;
// - stats_.allocated_bytes is the sum of active_ block sizes; reserved_bytes of the
//   segment sizes.
//
// Thread safety: a CachingAllocator is safe for concurrent use; one mutex guards
// all of it (the device's calls are made under it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "strata/cuda.h"
#include "strata/export.h"

namespace strata::detail::cuda {

// Opaque to the allocator: a cudaStream_t and a cudaEvent_t on the real device.
using StreamHandle = void*;
using EventHandle = void*;

// What the allocator needs of a device. Called with the allocator's lock held.
class STRATA_API DeviceInterface {
 public:
  virtual ~DeviceInterface() = default;
  // nbytes of device memory, or nullptr when the device has not that much free.
  // Throws strata::Error for any other failure.
  virtual void* malloc(size_t nbytes) = 0;
  virtual void free(void* ptr) noexcept = 0;
  // An event that completes once all the work queued on stream so far has finished.
  virtual EventHandle recordEvent(StreamHandle stream) = 0;
  virtual bool queryEvent(EventHandle event) = 0;
  virtual void releaseEvent(EventHandle event) noexcept = 0;
  // Waits for all the work on the device (every event then completes).
  virtual void synchronize() = 0;
  // Free and total bytes of the device; {0, 0} when unknown.
  virtual std::pair<size_t, size_t> memoryInfo() { return {0, 0}; }
  // "cuda:0": for messages.
  virtual std::string name() const = 0;
  // "the default stream", "stream 0x...": for messages.
  virtual std::string streamName(StreamHandle stream) const;
};

class STRATA_API CachingAllocator {
 public:
  static constexpr size_t kMinBlockSize = 512;           // every size is a multiple
  static constexpr size_t kSmallSize = 1 << 20;          // at most this: a small block
  static constexpr size_t kSmallBuffer = 2 << 20;        // the segment of small blocks
  static constexpr size_t kLargeBuffer = 20 << 20;       // the segment for large requests under kMinLargeAlloc
  static constexpr size_t kMinLargeAlloc = 10 << 20;     // from here, a segment of the request's own size
  static constexpr size_t kRoundLarge = 2 << 20;         // ... rounded up to this

  explicit CachingAllocator(std::unique_ptr<DeviceInterface> device);
  // Frees every segment. REQUIRES: nothing is allocated (the process-wide
  // allocators are never destroyed: tensors may die after static destructors run).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nbytes for work on stream; nullptr for 0 bytes. Throws Error(Device) when the
  // device is out of memory (Note [The caching allocator]).
  void* allocate(size_t nbytes, StreamHandle stream);
  // Gives back what allocate returned. REQUIRES: ptr came from this allocator and
  // is not freed yet (nullptr is ignored).
  void free(void* ptr) noexcept;
  // ptr's memory is also used by work on stream. Error(Value) when this allocator
  // did not hand out ptr.
  void recordStream(void* ptr, StreamHandle stream);
  // Waits for the device and frees every whole free segment.
  void emptyCache();

  strata::cuda::MemoryStats stats() const;
  void resetPeakStats();
  const DeviceInterface& device() const { return *device_; }

  // The block size a request of nbytes gets, and the segment size it would take.
  static size_t roundSize(size_t nbytes);
  static size_t segmentSize(size_t rounded);

 private:
  struct Segment;
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySize>;
  using PoolKey = std::pair<StreamHandle, bool>;  // (stream, small)

  Block* findFree(Pool& pool, size_t size);
  Block* adoptIdleSegment(StreamHandle stream, bool small, size_t size);
  Block* newSegment(StreamHandle stream, bool small, size_t size);
  void toPool(Block* block);
  void processEvents();
  void releaseCachedSegments();
  [[noreturn]] void throwOutOfMemory(size_t nbytes, StreamHandle stream, bool retried);

  std::unique_ptr<DeviceInterface> device_;
  mutable std::mutex mu_;
  std::map<PoolKey, Pool> pools_;                   // guarded by mu_
  std::unordered_map<void*, Block*> active_;        // guarded by mu_
  std::vector<std::pair<EventHandle, Block*>> pending_;  // guarded by mu_
  std::vector<Segment*> segments_;                  // guarded by mu_ (owned)
  strata::cuda::MemoryStats stats_;                 // guarded by mu_
};

// "1.50 GiB", "512 B": for messages.
STRATA_API std::string formatBytes(uint64_t bytes);

}  // namespace strata::detail::cuda
