// Test helper: a zero-filled byte buffer whose large sizes may be backed by 2 MiB pages.
//
// The first touch of a 4 KiB page costs about 10 us on the virtual machines the suite runs on,
// and a big matrix case gives every rank four buffers of 8 MiB: 8192 faults, 80 ms of kernel
// time per rank and call set-up, which was most of such a test's time. From 2 MiB on the buffer
// is its own anonymous mapping with MADV_HUGEPAGE (transparent huge pages in "madvise" mode, as
// Debian ships them), so the same bytes take 16 faults. Where the kernel gives no huge pages the
// mapping behaves like any other memory. Smaller buffers (all of them at the sanitizers' scale)
// stay on the heap, where ASan puts a red zone after them.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace chorus::testing {

// Whether large TestBytes come from huge pages (the default). The MPI suite turns them off:
// under Open MPI (vader) its matrix ran 2.4 times slower on them (mpi_transport_np4: 39 s
// against 16 s), the time going to memset and the kernel, not to faults.
inline bool& HugeTestPages() {
  static bool on = true;
  return on;
}

class TestBytes {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  explicit TestBytes(size_t bytes) : bytes_(bytes) {
    if (bytes < kHugePage || !HugeTestPages()) {
      heap_.resize(bytes);
      data_ = heap_.data();
      return;
    }
    // One huge page of slack, so the buffer can start on a huge-page boundary.
    mapped_ = ((bytes + kHugePage - 1) / kHugePage + 1) * kHugePage;
    void* region =
        mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) throw std::bad_alloc();
    region_ = static_cast<std::byte*>(region);
    const uintptr_t at = (reinterpret_cast<uintptr_t>(region) + kHugePage - 1) & ~(kHugePage - 1);
    data_ = reinterpret_cast<std::byte*>(at);
    // Advice only: without huge pages the buffer is ordinary memory.
    (void)madvise(data_, mapped_ - static_cast<size_t>(data_ - region_), MADV_HUGEPAGE);
  }
  ~TestBytes() {
    if (region_ != nullptr) munmap(region_, mapped_);
  }
  TestBytes(const TestBytes&) = delete;
  TestBytes& operator=(const TestBytes&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_;
  std::vector<std::byte> heap_;
  std::byte* region_ = nullptr;
  size_t mapped_ = 0;
  std::byte* data_ = nullptr;
};

}  // namespace chorus::testing
