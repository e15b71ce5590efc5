// Chunk and segment arithmetic shared by the algorithms (pure functions).
//
// A buffer of `count` elements is split into `parts` contiguous chunks in rank order; chunk c
// holds count / parts elements, plus one when c < count % parts, so sizes differ by at most one.
// A chunk is cut into segments of at most `segment` elements; segment j of chunk c is
// [j * segment, min((j + 1) * segment, Size(c))) within the chunk, and may be empty for the
// smaller chunks. Every chunk has Segments() segments (counting empty ones), so all ranks walk
// the same number of pipeline stages.
//
// A partition made from per-chunk counts (the v-collectives' blocks) has chunk c hold counts[c]
// elements, in order, and the same segments; nothing is padded to the largest chunk.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>

#include "algo/primitives.h"
#include "base/check.h"

namespace chorus::internal {

class Partition {
 public:
  Partition(size_t count, int parts, size_t segment)
      : count_(count), parts_(static_cast<size_t>(parts)), segment_(std::max<size_t>(segment, 1)) {
    CHORUS_CHECK(parts > 0);
  }
  // Chunk c holds counts[c] elements; `counts` must outlive the partition.
  Partition(std::span<const size_t> counts, size_t segment)
      : counts_(counts), parts_(counts.size()), segment_(std::max<size_t>(segment, 1)) {
    CHORUS_CHECK(!counts.empty());
    for (size_t n : counts) largest_ = std::max(largest_, n);
  }

  size_t Size(int chunk) const {
    if (!counts_.empty()) return counts_[static_cast<size_t>(chunk)];
    return count_ / parts_ + (static_cast<size_t>(chunk) < count_ % parts_ ? 1 : 0);
  }
  size_t Offset(int chunk) const {
    const size_t c = static_cast<size_t>(chunk);
    if (!counts_.empty()) {
      size_t offset = 0;
      for (size_t i = 0; i < c; ++i) offset += counts_[i];
      return offset;
    }
    return c * (count_ / parts_) + std::min(c, count_ % parts_);
  }
  // Pipeline stages: segments of the largest chunk.
  size_t Segments() const {
    return ((counts_.empty() ? Size(0) : largest_) + segment_ - 1) / segment_;
  }
  // Element offset (within the whole buffer) and length of segment `seg` of `chunk`.
  size_t SegmentOffset(int chunk, size_t seg) const {
    return Offset(chunk) + std::min(seg * segment_, Size(chunk));
  }
  size_t SegmentSize(int chunk, size_t seg) const {
    const size_t begin = std::min(seg * segment_, Size(chunk));
    return std::min(begin + segment_, Size(chunk)) - begin;
  }

 private:
  std::span<const size_t> counts_;  // empty: the even split of count_
  size_t count_ = 0;
  size_t largest_ = 0;
  size_t parts_;
  size_t segment_;
};

// (a mod n) for a possibly negative a.
inline int Mod(int a, int n) { return ((a % n) + n) % n; }

// `base` moved forward by `elems` elements of `elem_size` bytes; keeps constness.
template <typename T>
T* Advance(T* base, size_t elems, size_t elem_size) {
  using Byte = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;
  return reinterpret_cast<Byte*>(base) + elems * elem_size;
}

// What every algorithm does on a single rank: the result is the input.
inline void CopyUnlessInPlace(const void* send, void* recv, size_t bytes) {
  if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
}
// The same, for `count` elements of the call.
inline Status CopyLocal(const CallContext& ctx, const void* send, void* recv, size_t count) {
  CopyUnlessInPlace(send, recv, count * ctx.elem_size);
  return Status::Ok();
}

}  // namespace chorus::internal
