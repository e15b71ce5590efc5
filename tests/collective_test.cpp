// The collective matrix: kind x ranks x count x dtype x op x in-place, with exact data.
//
// One test per (kind, ranks, count); inside it every rank walks the same dtype x op x placement
// sequence on one communicator, so the test also proves that many calls in a row stay in step.
// Inputs repeat with period 35 (support/pattern.h), so expected outputs are built once per
// combination and compared bytewise. CHORUS_TEST_SCALE=small shrinks the largest count for the
// sanitizer builds.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "support/pattern.h"
#include "support/spawn.h"

namespace chorus {
namespace {

using testing::Expected;
using testing::InputValue;
using testing::Load;
using testing::Store;

constexpr size_t kPeriod = 35;  // InputValue(t, op, r, i) depends on i % 5 and i % 7 only

bool SmallScale() {
  const char* scale = std::getenv("CHORUS_TEST_SCALE");
  return scale != nullptr && std::string(scale) == "small";
}

size_t BigCount() { return SmallScale() ? (size_t{1} << 14) + 3 : (size_t{1} << 20) + 3; }

enum class CountCase { kZero, kOne, kSeven, kEight, kThousand, kTinySegments, kBig };

struct MatrixParam {
  CollectiveKind kind;
  int ranks;
  CountCase count_case;
};

// Count per rank block for reduce-scatter / all-gather, total for all-reduce.
size_t CountOf(const MatrixParam& m) {
  switch (m.count_case) {
    case CountCase::kZero: return 0;
    case CountCase::kOne: return 1;
    case CountCase::kSeven: return 7;
    case CountCase::kEight: return 8;
    case CountCase::kThousand:
    case CountCase::kTinySegments: return 1000;
    case CountCase::kBig:
      return m.kind == CollectiveKind::kAllReduce
                 ? BigCount()
                 : (BigCount() + static_cast<size_t>(m.ranks) - 1) / static_cast<size_t>(m.ranks);
  }
  return 0;
}

std::string Name(const ::testing::TestParamInfo<MatrixParam>& info) {
  static const char* kCounts[] = {"zero", "one", "seven", "eight", "thousand", "tinysegments",
                                  "big"};
  return std::string(CollectiveKindName(info.param.kind)) + "_p" +
         std::to_string(info.param.ranks) + "_" +
         kCounts[static_cast<int>(info.param.count_case)];
}

// `n` elements of rank r's input, in dtype t.
void FillInput(DataType t, ReduceOp op, int r, size_t offset, size_t n, void* out) {
  const size_t elem = DataTypeSize(t);
  std::vector<std::byte> period(kPeriod * elem);
  for (size_t i = 0; i < kPeriod; ++i) {
    Store(t, period.data(), i, static_cast<double>(InputValue(t, op, r, i)));
  }
  auto* dst = static_cast<std::byte*>(out);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * elem, period.data() + ((offset + i) % kPeriod) * elem, elem);
  }
}

// `n` elements of the expected reduction starting at global element `offset`.
void FillExpected(DataType t, ReduceOp op, int p, size_t offset, size_t n, void* out) {
  const size_t elem = DataTypeSize(t);
  std::vector<std::byte> period(kPeriod * elem);
  for (size_t i = 0; i < kPeriod; ++i) Store(t, period.data(), i, Expected(t, op, p, i));
  auto* dst = static_cast<std::byte*>(out);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * elem, period.data() + ((offset + i) % kPeriod) * elem, elem);
  }
}

// "" when equal, else where and how they differ.
std::string Compare(DataType t, const void* got, const void* want, size_t n) {
  const size_t elem = DataTypeSize(t);
  if (n == 0 || std::memcmp(got, want, n * elem) == 0) return "";
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(static_cast<const std::byte*>(got) + i * elem,
                    static_cast<const std::byte*>(want) + i * elem, elem) != 0) {
      return "element " + std::to_string(i) + " of " + std::to_string(n) + ": got " +
             std::to_string(Load(t, got, i)) + ", want " + std::to_string(Load(t, want, i));
    }
  }
  return "";
}

class CollectiveMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(CollectiveMatrix, ExactResults) {
  const MatrixParam m = GetParam();
  const int p = m.ranks;
  const size_t n = CountOf(m);
  const size_t total = m.kind == CollectiveKind::kAllReduce ? n : n * static_cast<size_t>(p);
  CallOptions call;
  if (m.count_case == CountCase::kTinySegments) call.segment_bytes = 24;

  auto group = CreateLocalGroup(p, {.timeout = std::chrono::seconds(60)});
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<std::vector<std::string>> errors(static_cast<size_t>(p));

  testing::RunRanks(*group, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<std::string>& err = errors[static_cast<size_t>(r)];
    const size_t max_bytes = (total + 1) * 8;
    std::vector<std::byte> send(max_bytes), recv(max_bytes), want(max_bytes), input(max_bytes);
    for (int d = 0; d < kNumDataTypes; ++d) {
      const auto t = static_cast<DataType>(d);
      const size_t elem = DataTypeSize(t);
      const int ops = m.kind == CollectiveKind::kAllGather ? 1 : kNumReduceOps;
      for (int o = 0; o < ops; ++o) {
        const auto op = static_cast<ReduceOp>(o);
        for (bool in_place : {false, true}) {
          const std::string what = std::string(DataTypeName(t)) + " " +
                                   std::string(ReduceOpName(op)) +
                                   (in_place ? " in-place" : " out-of-place") + " rank " +
                                   std::to_string(r);
          Status s;
          std::string diff;
          switch (m.kind) {
            case CollectiveKind::kAllReduce: {
              FillInput(t, op, r, 0, n, send.data());
              std::memcpy(input.data(), send.data(), n * elem);
              std::memset(recv.data(), 0xA5, n * elem);
              void* out = in_place ? send.data() : recv.data();
              s = comm.AllReduce({send.data(), n, t}, {out, n, t}, op, call);
              FillExpected(t, op, p, 0, n, want.data());
              diff = Compare(t, out, want.data(), n);
              if (diff.empty() && !in_place) diff = Compare(t, send.data(), input.data(), n);
              break;
            }
            case CollectiveKind::kReduceScatter: {
              FillInput(t, op, r, 0, total, send.data());
              std::byte* out = in_place ? send.data() + static_cast<size_t>(r) * n * elem
                                        : recv.data();
              s = comm.ReduceScatter({send.data(), total, t}, {out, n, t}, op, call);
              FillExpected(t, op, p, static_cast<size_t>(r) * n, n, want.data());
              diff = Compare(t, out, want.data(), n);
              break;
            }
            case CollectiveKind::kAllGather: {
              // Rank q contributes its input block q, so the gathered buffer is one pattern.
              std::memset(recv.data(), 0xA5, total * elem);
              std::byte* mine = in_place ? recv.data() + static_cast<size_t>(r) * n * elem
                                         : send.data();
              FillInput(t, ReduceOp::kSum, 0, static_cast<size_t>(r) * n, n, mine);
              s = comm.AllGather({mine, n, t}, {recv.data(), total, t}, call);
              FillInput(t, ReduceOp::kSum, 0, 0, total, want.data());
              diff = Compare(t, recv.data(), want.data(), total);
              break;
            }
          }
          if (!s.ok()) {
            err.push_back(what + ": " + s.ToString());
            return;  // the group is failed; later calls would only repeat it
          }
          if (!diff.empty()) err.push_back(what + ": " + diff);
        }
      }
    }
  });
  for (const auto& rank_errors : errors) {
    for (const std::string& e : rank_errors) ADD_FAILURE() << e;
  }
}

std::vector<MatrixParam> AllParams() {
  std::vector<MatrixParam> params;
  for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                              CollectiveKind::kAllGather}) {
    for (int ranks : {1, 2, 3, 4, 5, 7, 8}) {
      for (int c = 0; c <= static_cast<int>(CountCase::kBig); ++c) {
        params.push_back({kind, ranks, static_cast<CountCase>(c)});
      }
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Matrix, CollectiveMatrix, ::testing::ValuesIn(AllParams()), Name);

}  // namespace
}  // namespace chorus
