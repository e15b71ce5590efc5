// Memory the library touches once, when it makes it: staging that lives as long as a link.
// Every page is touched before the first call, so no call pays a first touch (about 10 us per
// 4 KiB page on the virtual machines this runs on).
//
// From 2 MiB on the bytes are an anonymous mapping of their own, aligned and advised for
// transparent huge pages (MADV_HUGEPAGE: Debian's default mode is "madvise"), which turns 512
// first touches into one; where the kernel gives no huge pages it is ordinary memory. A
// PROT_NONE page follows the last page, so a write past the end faults in every build. Smaller
// sizes come from the heap, zeroed.
#pragma once

#include <cstddef>
#include <memory>

namespace chorus::internal {

inline constexpr size_t kPage = 4096;

// n rounded up to a multiple of `to`.
constexpr size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

class TouchedPages {
 public:
  TouchedPages() = default;
  // `bytes` zero bytes, every page touched. Throws std::bad_alloc as new[] does.
  explicit TouchedPages(size_t bytes);
  ~TouchedPages();
  TouchedPages(TouchedPages&& other) noexcept;
  TouchedPages& operator=(TouchedPages&& other) noexcept;
  TouchedPages(const TouchedPages&) = delete;
  TouchedPages& operator=(const TouchedPages&) = delete;

  std::byte* get() const { return data_; }
  size_t size() const { return bytes_; }

  static constexpr size_t kHugePage = size_t{2} << 20;

 private:
  void Release();

  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  std::unique_ptr<std::byte[]> heap_;
  void* region_ = nullptr;  // the mapping, when there is one
  size_t region_bytes_ = 0;
};

}  // namespace chorus::internal
