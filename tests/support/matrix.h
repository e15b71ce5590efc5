// Test helper: the collective matrix, walked by one rank.
//
// One case is (kind, ranks, count); for it every rank walks the same dtype x op x placement
// sequence on one communicator, which also proves that many calls in a row stay in step.
// Inputs repeat with period 35 (support/pattern.h), so expected outputs are built once per
// combination and compared bytewise. Used by the thread (collective_test) and process
// (shm_test) suites.
//
// CHORUS_TEST_SCALE=small (the sanitizer builds) shrinks the largest count and walks a subset
// of dtypes and ops that still covers every element size and both kernel shapes (plain and
// finishing): the sanitizers look for memory and threading errors, and the full arithmetic
// matrix runs in the normal build and in reduce_test.
#pragma once

#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "algo/select.h"
#include "chorus/chorus.h"
#include "support/pattern.h"

namespace chorus::testing {

inline constexpr size_t kPeriod = 35;  // InputValue(t, op, r, i) depends on i % 5 and i % 7

inline bool SmallScale() {
  const char* scale = std::getenv("CHORUS_TEST_SCALE");
  return scale != nullptr && std::string(scale) == "small";
}

inline size_t BigCount() { return SmallScale() ? (size_t{1} << 14) + 3 : (size_t{1} << 20) + 3; }

enum class CountCase { kZero, kOne, kSeven, kEight, kThousand, kTinySegments, kBig };
inline constexpr int kNumCountCases = 7;

struct MatrixParam {
  CollectiveKind kind;
  int ranks;
  CountCase count_case;
  std::string algorithm;
};

// Count per rank block for reduce-scatter / all-gather, total for all-reduce.
inline size_t CountOf(const MatrixParam& m) {
  switch (m.count_case) {
    case CountCase::kZero:
      return 0;
    case CountCase::kOne:
      return 1;
    case CountCase::kSeven:
      return 7;
    case CountCase::kEight:
      return 8;
    case CountCase::kThousand:
    case CountCase::kTinySegments:
      return 1000;
    case CountCase::kBig:
      return m.kind == CollectiveKind::kAllReduce
                 ? BigCount()
                 : (BigCount() + static_cast<size_t>(m.ranks) - 1) / static_cast<size_t>(m.ranks);
  }
  return 0;
}

inline std::string MatrixName(const MatrixParam& m) {
  static const char* kCounts[] = {"zero",     "one",          "seven", "eight",
                                  "thousand", "tinysegments", "big"};
  return std::string(CollectiveKindName(m.kind)) + "_" + m.algorithm + "_p" +
         std::to_string(m.ranks) + "_" + kCounts[static_cast<int>(m.count_case)];
}

// Lets GoogleTest print a case by its name instead of its bytes.
inline void PrintTo(const MatrixParam& m, std::ostream* os) { *os << MatrixName(m); }

inline std::vector<MatrixParam> MatrixParams(const std::vector<int>& ranks) {
  std::vector<MatrixParam> params;
  for (const internal::AlgorithmInfo& algorithm : internal::Algorithms()) {
    for (int p : ranks) {
      for (int c = 0; c < kNumCountCases; ++c) {
        params.push_back(
            {algorithm.kind, p, static_cast<CountCase>(c), std::string(algorithm.name)});
      }
    }
  }
  return params;
}

// `n` elements of rank r's input starting at global element `offset`, in dtype t.
inline void FillInput(DataType t, ReduceOp op, int r, size_t offset, size_t n, void* out) {
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
inline void FillExpected(DataType t, ReduceOp op, int p, size_t offset, size_t n, void* out) {
  const size_t elem = DataTypeSize(t);
  std::vector<std::byte> period(kPeriod * elem);
  for (size_t i = 0; i < kPeriod; ++i) Store(t, period.data(), i, Expected(t, op, p, i));
  auto* dst = static_cast<std::byte*>(out);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * elem, period.data() + ((offset + i) % kPeriod) * elem, elem);
  }
}

// "" when equal, else where and how they differ.
inline std::string Compare(DataType t, const void* got, const void* want, size_t n) {
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

// Runs case `m` on this rank; returns one line per problem (empty when all is well).
inline std::vector<std::string> RunMatrixCase(Communicator& comm, const MatrixParam& m) {
  std::vector<std::string> errors;
  const int p = m.ranks;
  const int r = comm.rank();
  const size_t n = CountOf(m);
  const size_t total = m.kind == CollectiveKind::kAllReduce ? n : n * static_cast<size_t>(p);
  CallOptions call;
  call.algorithm = m.algorithm;
  if (m.count_case == CountCase::kTinySegments) call.segment_bytes = 24;

  const size_t max_bytes = (total + 1) * 8;
  std::vector<std::byte> send(max_bytes), recv(max_bytes), want(max_bytes), input(max_bytes);
  const bool small = SmallScale();
  for (int d = 0; d < kNumDataTypes; ++d) {
    const auto t = static_cast<DataType>(d);
    if (small && t != DataType::kInt8 && t != DataType::kBFloat16 && t != DataType::kFloat32 &&
        t != DataType::kUint64) {
      continue;
    }
    const size_t elem = DataTypeSize(t);
    const int ops = m.kind == CollectiveKind::kAllGather ? 1 : kNumReduceOps;
    for (int o = 0; o < ops; ++o) {
      const auto op = static_cast<ReduceOp>(o);
      if (small && op != ReduceOp::kSum && op != ReduceOp::kAvg) continue;
      for (bool in_place : {false, true}) {
        const std::string what =
            std::string(DataTypeName(t)) + " " + std::string(ReduceOpName(op)) +
            (in_place ? " in-place" : " out-of-place") + " rank " + std::to_string(r);
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
            std::byte* out =
                in_place ? send.data() + static_cast<size_t>(r) * n * elem : recv.data();
            s = comm.ReduceScatter({send.data(), total, t}, {out, n, t}, op, call);
            FillExpected(t, op, p, static_cast<size_t>(r) * n, n, want.data());
            diff = Compare(t, out, want.data(), n);
            break;
          }
          case CollectiveKind::kAllGather: {
            // Rank q contributes block q of one pattern, so the gathered buffer is that pattern.
            std::memset(recv.data(), 0xA5, total * elem);
            std::byte* mine =
                in_place ? recv.data() + static_cast<size_t>(r) * n * elem : send.data();
            FillInput(t, ReduceOp::kSum, 0, static_cast<size_t>(r) * n, n, mine);
            s = comm.AllGather({mine, n, t}, {recv.data(), total, t}, call);
            FillInput(t, ReduceOp::kSum, 0, 0, total, want.data());
            diff = Compare(t, recv.data(), want.data(), total);
            break;
          }
        }
        if (!s.ok()) {
          errors.push_back(what + ": " + s.ToString());
          return errors;  // the group is failed; later calls would only repeat it
        }
        if (!diff.empty()) errors.push_back(what + ": " + diff);
      }
    }
  }
  return errors;
}

}  // namespace chorus::testing
