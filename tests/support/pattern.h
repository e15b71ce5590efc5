// Test helper: exactly verifiable data for every dtype and op.
//
// Inputs are small integers chosen so that every partial result of every op is exactly
// representable in every dtype (int8 and float16 included), so results compare with ==.
// Expected values are computed here independently of the library's kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "chorus/types.h"

namespace chorus::testing {

inline bool IsUnsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
}
inline bool IsFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

// Input element i of rank r.
inline int64_t InputValue(DataType t, ReduceOp op, int r, size_t i) {
  const auto k = static_cast<int64_t>((static_cast<size_t>(r) * 3 + i) % 5);
  if (op == ReduceOp::kProd) return (r + static_cast<int64_t>(i % 7)) % 4 == 0 ? 2 : 1;
  return IsUnsigned(t) ? k : k - 2;  // [0, 4] or [-2, 2]
}

inline void Store(DataType t, void* base, size_t i, double v) {
  switch (t) {
    case DataType::kInt8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kUint8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kUint32:
      static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kUint64:
      static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v);
      break;
    case DataType::kFloat16:
      static_cast<Float16*>(base)[i] = ToFloat16(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<BFloat16*>(base)[i] = ToBFloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(base)[i] = v;
      break;
  }
}

inline double Load(DataType t, const void* base, size_t i) {
  switch (t) {
    case DataType::kInt8:
      return static_cast<const int8_t*>(base)[i];
    case DataType::kUint8:
      return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(base)[i];
    case DataType::kUint32:
      return static_cast<const uint32_t*>(base)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kUint64:
      return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case DataType::kFloat16:
      return ToFloat(static_cast<const Float16*>(base)[i]);
    case DataType::kBFloat16:
      return ToFloat(static_cast<const BFloat16*>(base)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(base)[i];
  }
  return NAN;
}

// The reduction over ranks 0..p-1 of element i, as stored in dtype t.
inline double Expected(DataType t, ReduceOp op, int p, size_t i) {
  int64_t acc = InputValue(t, op, 0, i);
  for (int r = 1; r < p; ++r) {
    const int64_t v = InputValue(t, op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op != ReduceOp::kAvg) return static_cast<double>(acc);
  if (!IsFloat(t)) return static_cast<double>(acc / p);  // truncation toward zero
  // Floats: the exact sum divided once in the element's arithmetic (fp16/bf16 in float32).
  std::vector<std::byte> cell(8);
  if (t == DataType::kFloat64) {
    Store(t, cell.data(), 0, static_cast<double>(acc) / p);
  } else {
    Store(t, cell.data(), 0, static_cast<double>(static_cast<float>(acc) / static_cast<float>(p)));
  }
  return Load(t, cell.data(), 0);
}

}  // namespace chorus::testing
