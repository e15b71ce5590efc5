// `chorus bench -c` patterns (see bench_check.h).
#include "bench_check.h"

#include <algorithm>
#include <cstring>

#include "base/collectives.h"

namespace chorus::cli {
namespace {

// Largest value every partial result may reach and still be exact in `dtype`; it also keeps
// expected values away from the 0xFF prefill (-1 or the type's maximum).
int64_t ExactLimit(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8:
      return 100;
    case DataType::kUint8:
    case DataType::kBFloat16:  // 8 significant bits: integers up to 256
      return 200;
    case DataType::kFloat16:  // 11 significant bits: integers up to 2048
      return 2000;
    default:
      return int64_t{1} << 20;
  }
}

uint32_t Mix(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ (c + 1) * 0xC2B2AE3Du;
  h ^= h >> 16;
  h *= 0x7FEB352Du;
  h ^= h >> 15;
  h *= 0x846CA68Bu;
  h ^= h >> 16;
  return h;
}

int64_t Pick(uint32_t rank, size_t k, uint32_t salt, int64_t bound) {  // in [0, bound)
  return static_cast<int64_t>(Mix(rank, static_cast<uint32_t>(k), salt) %
                              static_cast<uint32_t>(bound));
}

void StoreValue(DataType dtype, int64_t v, uint8_t* dst) {
  auto put = [dst](auto x) { std::memcpy(dst, &x, sizeof(x)); };
  switch (dtype) {
    case DataType::kInt8:
      put(static_cast<int8_t>(v));
      break;
    case DataType::kUint8:
      put(static_cast<uint8_t>(v));
      break;
    case DataType::kInt32:
      put(static_cast<int32_t>(v));
      break;
    case DataType::kUint32:
      put(static_cast<uint32_t>(v));
      break;
    case DataType::kInt64:
      put(static_cast<int64_t>(v));
      break;
    case DataType::kUint64:
      put(static_cast<uint64_t>(v));
      break;
    case DataType::kFloat16:
      put(ToFloat16(static_cast<float>(v)).bits);
      break;
    case DataType::kBFloat16:
      put(ToBFloat16(static_cast<float>(v)).bits);
      break;
    case DataType::kFloat32:
      put(static_cast<float>(v));
      break;
    case DataType::kFloat64:
      put(static_cast<double>(v));
      break;
  }
}

// Values of all ranks at pattern position k, chosen so that the reduction is exact.
void ReductionInputs(ReduceOp redop, int64_t limit, size_t k, std::vector<int64_t>& v) {
  const int p = static_cast<int>(v.size());
  const auto up = static_cast<uint32_t>(p);
  std::fill(v.begin(), v.end(), 0);
  switch (redop) {
    case ReduceOp::kSum:
      if (p <= limit) {
        const int64_t top = std::min<int64_t>(8, limit / p);
        for (int r = 0; r < p; ++r) v[r] = Pick(r, k, 1, top + 1);
      } else {  // too many ranks for dense values: one contributor per position
        v[k % up] = 1 + Pick(0, k, 2, 7);
      }
      break;
    case ReduceOp::kProd: {  // 2^t for t <= 6 fits every dtype
      const int64_t twos = Pick(0, k, 3, std::min(6, p) + 1);
      const int64_t first = Pick(0, k, 4, p);
      for (int r = 0; r < p; ++r) v[r] = ((r - first + p) % p < twos) ? 2 : 1;
      break;
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      for (int r = 0; r < p; ++r) v[r] = Pick(r, k, 5, std::min<int64_t>(limit, 100) + 1);
      break;
    case ReduceOp::kAvg:
      if (p == 1) {
        v[0] = Pick(0, k, 6, 9);
      } else if (limit / (p - 1) >= 2) {
        // The last rank tops the sum up to a multiple of p: sum <= (p-1)(top+1) <= limit.
        const int64_t top = std::min<int64_t>(8, limit / (p - 1) - 1);
        int64_t sum = 0;
        for (int r = 0; r + 1 < p; ++r) sum += v[r] = Pick(r, k, 7, top + 1);
        v[p - 1] = (p - sum % p) % p;
      } else if (p <= limit) {  // one contributor of a multiple of p
        v[k % up] = p * (1 + Pick(0, k, 8, limit / p));
      }  // else all zero: nothing else keeps the average exact in this dtype
      break;
  }
}

int64_t Reduce(ReduceOp redop, const std::vector<int64_t>& v) {
  int64_t acc = v[0];
  for (size_t r = 1; r < v.size(); ++r) {
    switch (redop) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v[r];
        break;
      case ReduceOp::kProd:
        acc *= v[r];
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v[r]);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v[r]);
        break;
    }
  }
  return redop == ReduceOp::kAvg ? acc / static_cast<int64_t>(v.size()) : acc;
}

}  // namespace

Patterns MakePatterns(BenchOp op, DataType dtype, ReduceOp redop, int ranks) {
  Patterns pat;
  pat.elem = DataTypeSize(dtype);
  pat.input.assign(ranks, std::vector<uint8_t>(kPeriod * pat.elem));
  const int64_t limit = ExactLimit(dtype);
  std::vector<int64_t> v(ranks);
  if (!InfoOf(op).reduces) {
    // Nothing is combined; values only need to tell ranks and positions apart.
    for (int r = 0; r < ranks; ++r) {
      for (size_t k = 0; k < kPeriod; ++k) {
        StoreValue(dtype, Pick(r, k, 9, std::min<int64_t>(limit, 100) + 1),
                   &pat.input[r][k * pat.elem]);
      }
    }
    return pat;
  }
  pat.expected.resize(kPeriod * pat.elem);
  for (size_t k = 0; k < kPeriod; ++k) {
    ReductionInputs(redop, limit, k, v);
    for (int r = 0; r < ranks; ++r) StoreValue(dtype, v[r], &pat.input[r][k * pat.elem]);
    StoreValue(dtype, Reduce(redop, v), &pat.expected[k * pat.elem]);
  }
  return pat;
}

void FillPattern(uint8_t* dst, size_t n, size_t elem, const uint8_t* table, size_t phase) {
  size_t k = phase % kPeriod;
  while (n > 0) {
    const size_t run = std::min(n, kPeriod - k);
    std::memcpy(dst, table + k * elem, run * elem);
    dst += run * elem;
    n -= run;
    k = 0;
  }
}

uint64_t CountMismatches(const uint8_t* out, size_t n, size_t elem, const uint8_t* table,
                         size_t phase) {
  uint64_t wrong = 0;
  size_t k = phase % kPeriod;
  while (n > 0) {
    const size_t run = std::min(n, kPeriod - k);
    const uint8_t* want = table + k * elem;
    if (std::memcmp(out, want, run * elem) != 0) {
      for (size_t j = 0; j < run; ++j) {
        wrong += std::memcmp(out + j * elem, want + j * elem, elem) != 0 ? 1 : 0;
      }
    }
    out += run * elem;
    n -= run;
    k = 0;
  }
  return wrong;
}

}  // namespace chorus::cli
