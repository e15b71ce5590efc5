// chorus/types.h: element types, reduction operators and untyped buffers.
//
// The API is untyped at its core (a buffer is pointer + element count + DataType) with typed
// std::span<T> sugar on top:
//
//   std::vector<float> grad(8);
//   chorus::MutableBuffer buf = chorus::MakeBuffer(std::span<float>(grad));   // float32, 8
//
// float16 and bfloat16 are stored as 16-bit patterns (chorus::Float16, chorus::BFloat16);
// reductions on them accumulate in float32 and round once per reduction step.
//
// Thread safety: everything here is a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include "chorus/export.h"

namespace chorus {
CHORUS_API_BEGIN

enum class DataType : uint8_t {
  kInt8,
  kUint8,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
};
inline constexpr int kNumDataTypes = 10;

// Integer kSum and kProd wrap around modulo 2^bits, as unsigned arithmetic does (for the
// signed types too: two's complement, never undefined). kMin and kMax on floating point treat
// -0 as less than +0; a NaN operand gives NaN.
enum class ReduceOp : uint8_t {
  kSum,
  kProd,
  kMin,
  kMax,
  // The mean. Floating point: the sum, divided by the number of ranks once at the end. Integer
  // types: the exact mean of the ranks' values, with no overflow on the way (int8 {100, 100}
  // averages to 100), rounded toward zero as C++ division does (int32 {-3, 0} gives -1).
  kAvg,
};
inline constexpr int kNumReduceOps = 5;

// Size in bytes of one element; 0 for a value outside the enum.
size_t DataTypeSize(DataType dtype);
// "float32", "bfloat16", ...; "unknown" for a value outside the enum.
std::string_view DataTypeName(DataType dtype);
// Accepts the names above plus the nccl-tests spellings ("float", "half", "bf16", "int", ...).
std::optional<DataType> ParseDataType(std::string_view name);
bool IsValid(DataType dtype);

std::string_view ReduceOpName(ReduceOp op);  // "sum", "prod", "min", "max", "avg"
std::optional<ReduceOp> ParseReduceOp(std::string_view name);
bool IsValid(ReduceOp op);

// IEEE 754 binary16 and bfloat16, stored as their bit patterns.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
// Round-to-nearest-even conversions (NaN stays NaN).
float ToFloat(Float16 h);
float ToFloat(BFloat16 b);
Float16 ToFloat16(float f);
BFloat16 ToBFloat16(float f);

// The DataType of a C++ element type.
template <typename T>
struct DataTypeOf;
template <>
struct DataTypeOf<int8_t> {
  static constexpr DataType value = DataType::kInt8;
};
template <>
struct DataTypeOf<uint8_t> {
  static constexpr DataType value = DataType::kUint8;
};
template <>
struct DataTypeOf<int32_t> {
  static constexpr DataType value = DataType::kInt32;
};
template <>
struct DataTypeOf<uint32_t> {
  static constexpr DataType value = DataType::kUint32;
};
template <>
struct DataTypeOf<int64_t> {
  static constexpr DataType value = DataType::kInt64;
};
template <>
struct DataTypeOf<uint64_t> {
  static constexpr DataType value = DataType::kUint64;
};
template <>
struct DataTypeOf<Float16> {
  static constexpr DataType value = DataType::kFloat16;
};
template <>
struct DataTypeOf<BFloat16> {
  static constexpr DataType value = DataType::kBFloat16;
};
template <>
struct DataTypeOf<float> {
  static constexpr DataType value = DataType::kFloat32;
};
template <>
struct DataTypeOf<double> {
  static constexpr DataType value = DataType::kFloat64;
};

template <typename T>
concept Element = requires {
  DataTypeOf<std::remove_cv_t<T>>::value;
};

// Read-only input buffer: `count` elements of `dtype` at `data`.
struct ConstBuffer {
  const void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;

  size_t bytes() const { return count * DataTypeSize(dtype); }
};

// Output (or in-place) buffer.
struct MutableBuffer {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;

  size_t bytes() const { return count * DataTypeSize(dtype); }
  operator ConstBuffer() const { return {data, count, dtype}; }  // NOLINT: in-place calls
};

template <Element T>
ConstBuffer MakeBuffer(std::span<const T> s) {
  return {s.data(), s.size(), DataTypeOf<T>::value};
}
template <Element T>
requires(!std::is_const_v<T>) MutableBuffer MakeBuffer(std::span<T> s) {
  return {s.data(), s.size(), DataTypeOf<T>::value};
}

CHORUS_API_END
}  // namespace chorus
