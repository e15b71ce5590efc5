// Touched pages (see pages.h).
#include "base/pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

namespace chorus::internal {
namespace {

// One store per page. Not instrumented for TSan: the memory is new and already zero, and it is
// shared only later, through the owner's own synchronisation (a link publishes its slots with a
// seq_cst store); instrumented, every page would also fault in TSan's shadow of it, which made
// Create the longest part of the sanitized TCP tests.
__attribute__((no_sanitize("thread"))) void Touch(std::byte* p, size_t bytes) {
  volatile std::byte* v = p;
  for (size_t i = 0; i < bytes; i += kPage) v[i] = std::byte{0};
}

}  // namespace

TouchedPages::TouchedPages(size_t bytes) : bytes_(bytes) {
  if (bytes < kHugePage) {
    heap_ = std::make_unique<std::byte[]>(bytes);  // value-initialised: zeroed, so touched
    data_ = heap_.get();
    return;
  }
  const size_t used = RoundUp(bytes, kPage);
  region_bytes_ = used + kHugePage + kPage;  // alignment slack, then the guard page
  region_ =
      mmap(nullptr, region_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region_ == MAP_FAILED) {
    region_ = nullptr;
    throw std::bad_alloc();
  }
  const auto at = RoundUp(reinterpret_cast<uintptr_t>(region_), kHugePage);
  data_ = reinterpret_cast<std::byte*>(at);
  // Both are advice: without huge pages, or without the guard, the bytes work the same.
  (void)madvise(data_, used, MADV_HUGEPAGE);
  (void)mprotect(data_ + used, kPage, PROT_NONE);
  Touch(data_, used);
}

TouchedPages::~TouchedPages() { Release(); }

TouchedPages::TouchedPages(TouchedPages&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      heap_(std::move(other.heap_)),
      region_(std::exchange(other.region_, nullptr)),
      region_bytes_(std::exchange(other.region_bytes_, 0)) {}

TouchedPages& TouchedPages::operator=(TouchedPages&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    heap_ = std::move(other.heap_);
    region_ = std::exchange(other.region_, nullptr);
    region_bytes_ = std::exchange(other.region_bytes_, 0);
  }
  return *this;
}

void TouchedPages::Release() {
  if (region_ != nullptr) munmap(region_, region_bytes_);
  region_ = nullptr;
  heap_.reset();
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace chorus::internal
