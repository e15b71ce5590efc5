// Names, sizes and parsing of the enums in chorus/types.h and chorus/communicator.h.
#include "chorus/types.h"

#include <array>
#include <string>

#include "base/collectives.h"
#include "chorus/communicator.h"

namespace chorus {
namespace {

struct DataTypeInfo {
  DataType dtype;
  size_t size;
  std::string_view name;
};

constexpr std::array<DataTypeInfo, kNumDataTypes> kDataTypes = {{
    {DataType::kInt8, 1, "int8"},
    {DataType::kUint8, 1, "uint8"},
    {DataType::kInt32, 4, "int32"},
    {DataType::kUint32, 4, "uint32"},
    {DataType::kInt64, 8, "int64"},
    {DataType::kUint64, 8, "uint64"},
    {DataType::kFloat16, 2, "float16"},
    {DataType::kBFloat16, 2, "bfloat16"},
    {DataType::kFloat32, 4, "float32"},
    {DataType::kFloat64, 8, "float64"},
}};

// nccl-tests and numpy spellings accepted by ParseDataType.
struct Alias {
  std::string_view name;
  DataType dtype;
};
constexpr std::array<Alias, 12> kDataTypeAliases = {{
    {"char", DataType::kInt8},
    {"uchar", DataType::kUint8},
    {"int", DataType::kInt32},
    {"uint", DataType::kUint32},
    {"half", DataType::kFloat16},
    {"fp16", DataType::kFloat16},
    {"bf16", DataType::kBFloat16},
    {"float", DataType::kFloat32},
    {"fp32", DataType::kFloat32},
    {"double", DataType::kFloat64},
    {"fp64", DataType::kFloat64},
    {"int64_t", DataType::kInt64},
}};

constexpr std::array<std::string_view, kNumReduceOps> kReduceOpNames = {"sum", "prod", "min", "max",
                                                                        "avg"};

}  // namespace

bool IsValid(DataType dtype) { return static_cast<unsigned>(dtype) < kNumDataTypes; }
bool IsValid(ReduceOp op) { return static_cast<unsigned>(op) < kNumReduceOps; }

size_t DataTypeSize(DataType dtype) {
  return IsValid(dtype) ? kDataTypes[static_cast<size_t>(dtype)].size : 0;
}

std::string_view DataTypeName(DataType dtype) {
  return IsValid(dtype) ? kDataTypes[static_cast<size_t>(dtype)].name : "unknown";
}

std::optional<DataType> ParseDataType(std::string_view name) {
  for (const DataTypeInfo& info : kDataTypes) {
    if (info.name == name) return info.dtype;
  }
  for (const Alias& alias : kDataTypeAliases) {
    if (alias.name == name) return alias.dtype;
  }
  return std::nullopt;
}

std::string_view ReduceOpName(ReduceOp op) {
  return IsValid(op) ? kReduceOpNames[static_cast<size_t>(op)] : "unknown";
}

std::optional<ReduceOp> ParseReduceOp(std::string_view name) {
  for (size_t i = 0; i < kReduceOpNames.size(); ++i) {
    if (kReduceOpNames[i] == name) return static_cast<ReduceOp>(i);
  }
  return std::nullopt;
}

std::string_view CollectiveKindName(CollectiveKind kind) {
  if (!internal::IsCollective(static_cast<unsigned>(kind))) return "unknown";
  return internal::Collective(kind).name;
}

}  // namespace chorus
