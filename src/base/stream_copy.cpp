// Non-temporal copy (see stream_copy.h).
#include "base/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace chorus::internal {

bool StreamOutputs(size_t call_bytes, int ranks_on_host) {
  // About one last-level cache (32 MiB here; sysconf reports the host's 320 MiB in this VM).
  // Measured with 2 ranks: streaming an 8 MiB all-gather halves its speed, 16 MiB is a wash,
  // 32 MiB and up gain a third.
  constexpr size_t kCacheBytes = size_t{32} << 20;
  return call_bytes * static_cast<size_t>(std::max(ranks_on_host, 1)) > kCacheBytes;
}

namespace {

// memcpy through 16-byte loads and line-aligned stores: `stream` picks non-temporal stores
// (then fenced, so a release store that follows is ordered after them) over ordinary ones.
// Copies shorter than four lines, and the head before the first line, go through memcpy.
template <bool stream>
void CopyByLines(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  constexpr size_t kLine = 64;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (bytes < 4 * kLine) {
    if (bytes > 0) std::memcpy(d, s, bytes);
    return;
  }
  // Stores must be 16-byte aligned; align to a whole line so no line is written twice.
  const size_t head = (kLine - reinterpret_cast<uintptr_t>(d) % kLine) % kLine;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= kLine; bytes -= kLine, d += kLine, s += kLine) {
    // The whole line is loaded before any of it is stored, as four registers.
    __m128i v[kLine / 16];
#pragma GCC unroll 4
    for (size_t k = 0; k < kLine / 16; ++k) {
      v[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16 * k));
    }
#pragma GCC unroll 4
    for (size_t k = 0; k < kLine / 16; ++k) {
      if constexpr (stream) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16 * k), v[k]);
      } else {
        _mm_store_si128(reinterpret_cast<__m128i*>(d + 16 * k), v[k]);
      }
    }
  }
  if constexpr (stream) _mm_sfence();
  std::memcpy(d, s, bytes);
#else
  if (bytes > 0) std::memcpy(dst, src, bytes);
#endif
}

}  // namespace

void StreamCopy(void* dst, const void* src, size_t bytes) {
  CopyByLines</*stream=*/true>(dst, src, bytes);
}

void MisalignedCopy(void* dst, const void* src, size_t bytes) {
  CopyByLines</*stream=*/false>(dst, src, bytes);
}

}  // namespace chorus::internal
