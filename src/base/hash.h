// FNV-1a, 64 bits: the digest ranks compare to find that they passed different values (an
// algorithm's name, a v-collective's counts) and the file store's file names. Not for secrets.
//
//   Fnv1a("ring") == Fnv1a("ring") on every rank and every run
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace chorus::internal {

inline constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

// One more byte into the running hash `h`.
constexpr uint64_t FnvStep(uint64_t h, uint8_t byte) { return (h ^ byte) * 0x100000001b3ull; }

constexpr uint64_t Fnv1a(std::string_view text, uint64_t basis = kFnvBasis) {
  uint64_t h = basis;
  for (char c : text) h = FnvStep(h, static_cast<uint8_t>(c));
  return h;
}

}  // namespace chorus::internal
