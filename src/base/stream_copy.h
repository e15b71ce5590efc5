// Copies into a large collective's output, which nothing reads again soon.
//
// A plain memcpy into memory that is not cached first reads every destination line (to own it)
// and then writes it back: three memory passes per byte. Non-temporal stores skip the read and
// bypass the caches, so the copy costs two. Measured here with both cores copying 32 MiB at
// once: 7.5 GB/s per core with memcpy, 12 GB/s with streaming stores. For buffers that fit the
// cache it is the other way round (the next reader misses), so callers decide per call.
//
// Thread safety: pure functions. StreamCopy fences its stores before returning, so a release
// store that follows (posting a message) is ordered after them.
#pragma once

#include <cstddef>
#include <cstring>

namespace chorus::internal {

// True when a call whose total buffer is `call_bytes`, run by `ranks_on_host` ranks of this
// host at once, cannot keep its buffers in the last-level cache: then its outputs stream.
bool StreamOutputs(size_t call_bytes, int ranks_on_host);

// memcpy(dst, src, bytes) with non-temporal stores where the CPU has them.
void StreamCopy(void* dst, const void* src, size_t bytes);

// StreamCopy when `stream`, else memcpy.
inline void CopyOut(bool stream, void* dst, const void* src, size_t bytes) {
  if (stream) {
    StreamCopy(dst, src, bytes);
  } else if (bytes > 0) {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace chorus::internal
