// bench_check.h: the exact-result patterns of `chorus bench -c`.
//
// Inputs are small non-negative integers that every dtype (int8 and bfloat16 included) holds
// exactly, chosen per reduce op so that no partial result leaves that range: prod multiplies a
// few 2s among 1s, avg gets sums that are multiples of the rank count. Values repeat with a prime
// period, so a block written at a wrong offset shows up, and outputs are prefilled with 0xFF
// bytes (NaN, -1 or the type's maximum), which is never an expected value. Every rank builds
// every rank's pattern (they are small), so a rank can check an all-gather on its own.
//
//   Patterns pat = MakePatterns(OpOf(CollectiveKind::kAllReduce), DataType::kFloat32, ReduceOp::kSum, 4);
//   FillPattern(send, count, pat.elem, pat.input[rank].data(), 0);
//   ... all-reduce ...
//   uint64_t wrong = CountMismatches(recv, count, pat.elem, pat.expected.data(), 0);
//
// Thread safety: values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench_config.h"
#include "chorus/chorus.h"

namespace chorus::cli {

// Checking patterns repeat with this prime period (in elements).
inline constexpr size_t kPeriod = 251;

// One period of every rank's input and of the expected result, as bytes of the element type.
struct Patterns {
  size_t elem = 0;
  std::vector<std::vector<uint8_t>> input;  // [rank], kPeriod elements
  std::vector<uint8_t> expected;            // reductions only, kPeriod elements
};

Patterns MakePatterns(BenchOp op, DataType dtype, ReduceOp redop, int ranks);

// dst[j] = table[(phase + j) % kPeriod] for j < n.
void FillPattern(uint8_t* dst, size_t n, size_t elem, const uint8_t* table, size_t phase);

// How many of out[j], j < n, differ from table[(phase + j) % kPeriod] (bit for bit).
uint64_t CountMismatches(const uint8_t* out, size_t n, size_t elem, const uint8_t* table,
                         size_t phase);

}  // namespace chorus::cli
