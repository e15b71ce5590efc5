// Test helper: the collective matrix, walked by one rank.
//
// One case is (kind, ranks, count); for it every rank walks the same dtype x op x placement
// sequence on one communicator, which also proves that many calls in a row stay in step.
// Inputs repeat with period 35 (support/pattern.h), so expected outputs are built once per
// combination and compared bytewise. Used by the thread (collective_test) and process
// (shm_test) suites.
//
// The long cases (the big count, tiny segments) walk fewer dtype x op x placement calls than
// the short ones, which walk them all at every p (WalkOf says which); the whole arithmetic is
// reduce_test's. CHORUS_TEST_SCALE=small (the sanitizer builds) shrinks the largest count and
// walks the representative calls in every case: the sanitizers look for memory and threading
// errors.
#pragma once

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "algo/select.h"
#include "base/collectives.h"
#include "chorus/chorus.h"
#include "support/group.h"
#include "support/pattern.h"
#include "support/test_bytes.h"

namespace chorus::testing {

inline constexpr size_t kPeriod = 35;  // InputValue(t, op, r, i) depends on i % 5 and i % 7

inline bool SmallScale() {
  const char* scale = std::getenv("CHORUS_TEST_SCALE");
  return scale != nullptr && std::string(scale) == "small";
}

// The sanitizers' scale divides the big count by 64, and the matrices' segment with it.
inline constexpr size_t kSmallScaleDivisor = 64;

inline size_t BigCount() { return (size_t{1} << 20) / (SmallScale() ? kSmallScaleDivisor : 1) + 3; }

// The segment (CommOptions::segment_bytes) of the matrices' communicators: the default, and at
// the sanitizers' scale 1/64 of it (16 KiB), so that the big case crosses as many segment
// boundaries as in the normal build, and the staging Create touches page by page (under TSan
// every page's shadow too: most of a sanitized TCP case's time) is 64 times smaller.
inline size_t MatrixSegmentBytes() {
  const size_t normal = CommOptions{}.segment_bytes;
  return SmallScale() ? normal / kSmallScaleDivisor : normal;
}

enum class CountCase { kZero, kOne, kSeven, kEight, kThousand, kTinySegments, kBig };
inline constexpr int kNumCountCases = 7;

// The count cases the sanitizer builds run: one element, an odd few, many tiny segments and many
// full ones, which is every path a message takes; zero, eight and a thousand run in the normal
// build only.
inline bool SanitizersRun(CountCase c) {
  return c != CountCase::kZero && c != CountCase::kEight && c != CountCase::kThousand;
}

struct MatrixParam {
  CollectiveKind kind;
  int ranks;
  CountCase count_case;
  std::string algorithm;
};

// The block n of the count relation (base/collectives.h): the per-rank block where a buffer
// holds p of them, the whole buffer where both hold one.
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
    case CountCase::kBig: {  // a total of about BigCount()
      const internal::Counts counts = internal::Collective(m.kind).counts;
      const size_t blocks = std::max({internal::SendBlocks(counts, m.ranks),
                                      internal::RecvBlocks(counts, m.ranks), size_t{1}});
      return (BigCount() + blocks - 1) / blocks;
    }
  }
  return 0;
}

// The root of a rooted case: it moves with the count case, so that over a case's counts the
// root is the first rank, the last and ones in the middle.
inline int RootOf(const MatrixParam& m) {
  if (!internal::Collective(m.kind).rooted) return 0;
  static constexpr int kRoots[] = {0, -1, 1, -2, 2, -1, 0};  // negative: from the end
  const int pick = kRoots[static_cast<int>(m.count_case)];
  return ((pick % m.ranks) + m.ranks) % m.ranks;
}

inline std::string MatrixName(const MatrixParam& m) {
  static const char* kCounts[] = {"zero",     "one",          "seven", "eight",
                                  "thousand", "tinysegments", "big"};
  std::string name = std::string(CollectiveKindName(m.kind)) + "_" + m.algorithm + "_p" +
                     std::to_string(m.ranks) + "_" + kCounts[static_cast<int>(m.count_case)];
  if (internal::Collective(m.kind).rooted) name += "_root" + std::to_string(RootOf(m));
  return name;
}

// Lets GoogleTest print a case by its name instead of its bytes.
inline void PrintTo(const MatrixParam& m, std::ostream* os) { *os << MatrixName(m); }

// Every algorithm of every collective at each rank count and count case (a barrier has no
// counts: one case).
inline std::vector<MatrixParam> MatrixParams(const std::vector<int>& ranks) {
  std::vector<MatrixParam> params;
  for (const internal::AlgorithmInfo& algorithm : internal::Algorithms()) {
    const bool counted = internal::Collective(algorithm.kind).counts != internal::Counts::kNone;
    for (int p : ranks) {
      for (int c = 0; c < (counted ? kNumCountCases : 1); ++c) {
        params.push_back(
            {algorithm.kind, p, static_cast<CountCase>(c), std::string(algorithm.name)});
      }
    }
  }
  return params;
}

inline Status CallCollective(Communicator& comm, const internal::CallArgs& call,
                             const CallOptions& options) {
  return internal::RunCollective(comm, call, options);
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

// Scratch buffers for CheckedCall, large enough for `elements` of any dtype; the big cases'
// come from huge pages (support/test_bytes.h).
struct CallBuffers {
  explicit CallBuffers(size_t elements)
      : bytes((elements + 1) * 8), send(bytes), recv(bytes), want(bytes), input(bytes) {}
  size_t bytes;
  TestBytes send, recv, want, input;
};

// The total buffer of a call of `kind` on p ranks with count n (CountOf's meaning).
inline size_t TotalOf(CollectiveKind kind, size_t n, int p) {
  return internal::CountsFor(internal::Collective(kind), n, p).total;
}

// Elements a CallBuffers needs for a case of `kind` with block n (a v-collective's blocks
// hold up to n + 4, VariedCount, and displaced ones have p + 1 gaps of one element).
inline size_t BufferElementsOf(CollectiveKind kind, size_t n, int p) {
  if (!internal::Collective(kind).varied) return TotalOf(kind, n, p);
  return TotalOf(kind, n + 4, p) + static_cast<size_t>(p) + 1;
}

struct CheckedResult {
  Status status;
  std::string diff;  // "" when the result is exact
};

// What a moved block holds: block `block` of rank `rank`'s send, n elements. Values depend on
// the rank, the block and the position (and repeat only every 97 elements), so a block from
// the wrong rank or place shows; they are small integers, exact in every dtype.
inline void FillMoved(DataType t, int rank, int block, size_t n, void* out) {
  const int64_t shift = IsUnsigned(t) ? 0 : 48;
  for (size_t i = 0; i < n; ++i) {
    const auto v = static_cast<int64_t>(
        (static_cast<size_t>(rank) * 37 + static_cast<size_t>(block) * 11 + i) % 97);
    Store(t, out, i, static_cast<double>(v - shift));
  }
}

// The block lengths of a v-collective's case with block n: rank `from`'s block for rank `to`
// (all-to-all-v), or rank q's block with from = to = q. Uneven, with zeros at every third pair
// and, on the diagonal (the blocks of the collectives whose counts every rank shares), at ranks
// 1, 4, 7; all zero when n is. At most n + 4.
inline size_t VariedCount(size_t n, int from, int to) {
  const bool zero = from == to ? from % 3 == 1 : (from + 2 * to) % 3 == 1;
  if (n == 0 || zero) return 0;
  return n + static_cast<size_t>((from + 3 * to) % 5);
}

// The lengths of the blocks of one rank's send and recv in a case with block n: n each, or a
// v-collective's VariedCount. A rooted v-collective's ranks all see the root's lengths (the
// others pass them too, and they are ignored).
struct CaseLayout {
  std::vector<size_t> send;  // one entry per block
  std::vector<size_t> recv;
  // Displaced (all-to-all-v's second placement): where each block starts, and the buffers'
  // counts, which then include the gaps. Empty and 0 when the blocks lie back to back.
  std::vector<size_t> send_at;
  std::vector<size_t> recv_at;
  size_t send_extent = 0;
  size_t recv_extent = 0;
  bool displaced() const { return !send_at.empty(); }
  size_t send_count() const { return displaced() ? send_extent : Sum(send); }
  size_t recv_count() const { return displaced() ? recv_extent : Sum(recv); }
  size_t SendAt(size_t j) const { return displaced() ? send_at[j] : Offset(send, j); }
  size_t RecvAt(size_t j) const { return displaced() ? recv_at[j] : Offset(recv, j); }
  static size_t Sum(const std::vector<size_t>& v) {
    size_t s = 0;
    for (size_t x : v) s += x;
    return s;
  }
  static size_t Offset(const std::vector<size_t>& v, size_t j) {
    size_t s = 0;
    for (size_t i = 0; i < j; ++i) s += v[i];
    return s;
  }
};

inline CaseLayout LayoutOf(const internal::CollectiveInfo& c, size_t n, int p, int r) {
  CaseLayout layout;
  if (!c.varied) {
    layout.send.assign(internal::SendBlocks(c.counts, p), n);
    layout.recv.assign(internal::RecvBlocks(c.counts, p), n);
    return layout;
  }
  const bool both = c.counts == internal::Counts::kBothAreP;
  const bool send_per_rank = internal::SendIsPerRank(c.counts);
  const bool recv_per_rank = internal::RecvIsPerRank(c.counts);
  for (int q = 0; q < p; ++q) {
    if (send_per_rank) layout.send.push_back(both ? VariedCount(n, r, q) : VariedCount(n, q, q));
    if (recv_per_rank) layout.recv.push_back(both ? VariedCount(n, q, r) : VariedCount(n, q, q));
  }
  if (!send_per_rank) layout.send.push_back(VariedCount(n, r, r));
  if (!recv_per_rank) layout.recv.push_back(VariedCount(n, r, r));
  return layout;
}

// Whether a collective has an in-place form (all-to-all-v has none).
inline bool HasInPlace(const internal::CollectiveInfo& c) {
  return c.counts != internal::Counts::kNone && !c.in_place.empty();
}

// Whether a collective takes displacements (all-to-all-v). Its walks' second placement is
// then "displaced" where the others' is in place.
inline bool TakesDispls(const internal::CollectiveInfo& c) {
  return c.kind == CollectiveKind::kAllToAllV;
}

// Places the blocks in reverse rank order, with a gap of one element before each and after
// the last, so that a call that ignored the displacements, or wrote outside its blocks, shows.
inline std::vector<size_t> Displaced(const std::vector<size_t>& lengths, size_t* extent) {
  std::vector<size_t> at(lengths.size());
  size_t next = 1;
  for (size_t j = lengths.size(); j-- > 0;) {
    at[j] = next;
    next += lengths[j] + 1;
  }
  *extent = next;
  return at;
}

// One call of `kind` with block n on this rank of p, with inputs whose result is known
// exactly; checks what the collective's row (base/collectives.h) says each rank ends with, and
// that an input the call must not change did not change.
inline CheckedResult CheckedCall(Communicator& comm, CollectiveKind kind, DataType t, ReduceOp op,
                                 size_t n, int root, bool in_place, const CallOptions& options,
                                 CallBuffers& b) {
  using internal::Outcome;
  const internal::CollectiveInfo& c = internal::Collective(kind);
  const int p = comm.size();
  const int r = comm.rank();
  const bool is_root = r == root;
  CaseLayout layout = LayoutOf(c, n, p, r);
  // The second placement of a collective that takes displacements.
  const bool displaced = in_place && TakesDispls(c);
  if (displaced) {
    layout.send_at = Displaced(layout.send, &layout.send_extent);
    layout.recv_at = Displaced(layout.recv, &layout.recv_extent);
    in_place = false;
  }
  const size_t send_count = layout.send_count();
  const size_t recv_count = layout.recv_count();
  const size_t elem = DataTypeSize(t);
  // The buffers: in place, the small one is this rank's block of the large one.
  std::memset(b.send.data(), 0x5A, b.bytes);
  std::memset(b.recv.data(), 0xA5, b.bytes);
  std::byte* in = b.send.data();
  std::byte* out = b.recv.data();
  if (in_place) {
    if (send_count < recv_count || layout.recv.size() > layout.send.size()) {
      in = b.recv.data() + CaseLayout::Offset(layout.recv, static_cast<size_t>(r)) * elem;
    } else if (layout.send.size() > layout.recv.size()) {
      out = b.send.data() + CaseLayout::Offset(layout.send, static_cast<size_t>(r)) * elem;
    } else {
      out = b.send.data();
    }
  }
  // Inputs: rank r's values; for the collectives that move data, each block of the send tells
  // its rank and block apart.
  if (c.outcome == Outcome::kMoved) {
    for (size_t j = 0; j < layout.send.size(); ++j) {
      FillMoved(t, r, static_cast<int>(j), layout.send[j], in + layout.SendAt(j) * elem);
    }
  } else if (c.outcome != Outcome::kNothing) {
    FillInput(t, op, r, 0, send_count, in);
  }
  std::memcpy(b.input.data(), in, send_count * elem);
  internal::CallArgs args{kind, {in, send_count, t}, {out, recv_count, t}, op, root, {}, {}};
  if (c.varied) {
    if (internal::SendIsPerRank(c.counts)) args.send_counts = layout.send;
    if (internal::RecvIsPerRank(c.counts)) args.recv_counts = layout.recv;
  }
  if (displaced) {
    args.send_displs = layout.send_at;
    args.recv_displs = layout.recv_at;
  }
  CheckedResult result{CallCollective(comm, args, options), ""};
  if (!result.status.ok()) return result;
  std::string& diff = result.diff;
  void* want = b.want.data();
  const bool writes_recv = !c.recv_only_at_root || is_root;
  switch (c.outcome) {
    case Outcome::kCombined:
      FillExpected(t, op, p, 0, n, want);
      diff = Compare(t, out, want, n);
      break;
    case Outcome::kCombinedBlock: {
      const size_t at = CaseLayout::Offset(layout.send, static_cast<size_t>(r));
      FillExpected(t, op, p, at, recv_count, want);
      diff = Compare(t, out, want, recv_count);
      break;
    }
    case Outcome::kCombinedAtRoot:
      if (is_root) {
        FillExpected(t, op, p, 0, n, want);
        diff = Compare(t, out, want, n);
      }
      break;
    case Outcome::kMoved:
      for (size_t j = 0; j < layout.recv.size() && writes_recv && diff.empty(); ++j) {
        const internal::BlockSource from = c.source(r, static_cast<int>(j), root);
        FillMoved(t, from.rank, from.block, layout.recv[j], want);
        diff = Compare(t, out + layout.RecvAt(j) * elem, want, layout.recv[j]);
        if (!diff.empty()) diff = "block " + std::to_string(j) + ": " + diff;
      }
      if (displaced && diff.empty()) {  // and the gaps as they were
        std::memset(want, 0xA5, recv_count * elem);
        for (size_t j = 0; j < layout.recv.size(); ++j) {
          const internal::BlockSource from = c.source(r, static_cast<int>(j), root);
          FillMoved(t, from.rank, from.block, layout.recv[j],
                    static_cast<std::byte*>(want) + layout.RecvAt(j) * elem);
        }
        diff = Compare(t, out, want, recv_count);
        if (!diff.empty()) diff = "outside the displaced blocks: " + diff;
      }
      break;
    case Outcome::kNothing:
      break;
  }
  // A rank whose recv the call does not write (out of place: in place it is the input).
  if (!writes_recv && !in_place) {
    std::memset(want, 0xA5, recv_count * elem);
    diff = Compare(t, out, want, recv_count);
    if (!diff.empty()) diff = "a non-root rank's recv was written: " + diff;
  }
  // What the call only reads stays as it was: out of place the input; in place too where this
  // rank's buffer is not an output (a non-root rank of reduce and gather).
  const bool ignores_send = c.send_only_at_root && !is_root;
  const bool reads_only =
      c.outcome != Outcome::kNothing && !ignores_send && (!in_place || !writes_recv);
  if (diff.empty() && reads_only) {
    diff = Compare(t, in, b.input.data(), send_count);
    if (!diff.empty()) diff = "the input changed: " + diff;
  }
  return result;
}

// One call of a case: its dtype, op (ignored by a collective that does not reduce) and placement.
struct WalkStep {
  DataType dtype;
  ReduceOp op;
  bool in_place;
};

// The calls a case makes, one of three walks:
// - every: every dtype x op x placement (the short counts of the normal build, at every p);
// - diagonal: every dtype once, the ops in turn and the placements alternating, so each dtype
//   and each op goes through the case's path, each op in both placements (tiny segments below
//   seven ranks: a segmented call is a long one, and its arithmetic is the short counts');
// - representative: one dtype of each element size, with sum (a plain kernel) and avg (a
//   finishing one) and both placements each twice (the big count, tiny segments from seven ranks
//   on, and every case of the sanitizer builds, which look for memory and threading errors).
// The whole arithmetic of every dtype and op is reduce_test's.
enum class Walk { kEvery, kDiagonal, kRepresentative };

inline Walk WalkKindOf(const MatrixParam& m) {
  if (SmallScale() || m.count_case == CountCase::kBig) return Walk::kRepresentative;
  if (m.count_case == CountCase::kTinySegments) {
    return m.ranks >= 7 ? Walk::kRepresentative : Walk::kDiagonal;
  }
  return Walk::kEvery;
}

inline std::vector<WalkStep> WalkOf(const MatrixParam& m) {
  const internal::CollectiveInfo& c = internal::Collective(m.kind);
  if (c.counts == internal::Counts::kNone) {
    return {{DataType::kInt8, ReduceOp::kSum, false}};  // a barrier: one call
  }
  // A collective without an in-place form makes every call out of place; all-to-all-v's
  // second placement is displaced blocks.
  const bool in_place_too = HasInPlace(c) || TakesDispls(c);
  std::vector<WalkStep> steps;
  switch (WalkKindOf(m)) {
    case Walk::kRepresentative:
      steps = {{DataType::kInt8, ReduceOp::kSum, false},
               {DataType::kBFloat16, ReduceOp::kAvg, in_place_too},
               {DataType::kFloat32, ReduceOp::kSum, in_place_too},
               {DataType::kUint64, ReduceOp::kAvg, false}};
      break;
    case Walk::kDiagonal:
      for (int d = 0; d < kNumDataTypes; ++d) {
        steps.push_back({static_cast<DataType>(d), static_cast<ReduceOp>(d % kNumReduceOps),
                         in_place_too && d % 2 == 1});
      }
      break;
    case Walk::kEvery:
      for (int d = 0; d < kNumDataTypes; ++d) {
        for (int o = 0; o < (c.reduces ? kNumReduceOps : 1); ++o) {
          for (bool in_place : {false, true}) {
            if (in_place && !in_place_too) continue;
            steps.push_back({static_cast<DataType>(d), static_cast<ReduceOp>(o), in_place});
          }
        }
      }
      break;
  }
  return steps;
}

// Runs case `m` on this rank; returns one line per problem (empty when all is well).
inline std::vector<std::string> RunMatrixCase(Communicator& comm, const MatrixParam& m) {
  const internal::CollectiveInfo& c = internal::Collective(m.kind);
  std::vector<std::string> errors;
  const size_t n = CountOf(m);
  CallOptions call;
  call.algorithm = m.algorithm;
  if (m.count_case == CountCase::kTinySegments) call.segment_bytes = 24;
  CallBuffers buffers(BufferElementsOf(m.kind, n, m.ranks));
  for (const WalkStep& step : WalkOf(m)) {
    const DataType t = step.dtype;
    const ReduceOp op = step.op;
    const bool in_place = step.in_place;
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict) on a chain of + here.
    std::string what(c.counts != internal::Counts::kNone ? DataTypeName(t)
                                                         : std::string_view("no data"));
    if (c.reduces) what.append(" ").append(ReduceOpName(op));
    what.append(!in_place ? " out-of-place" : TakesDispls(c) ? " displaced" : " in-place");
    what.append(" rank ").append(std::to_string(comm.rank()));
    const CheckedResult got =
        CheckedCall(comm, m.kind, t, op, n, RootOf(m), in_place, call, buffers);
    if (!got.status.ok()) {
      errors.push_back(what + ": " + got.status.ToString());
      return errors;  // the group is failed; later calls would only repeat it
    }
    if (!got.diff.empty()) errors.push_back(what + ": " + got.diff);
  }
  return errors;
}

// ---------------------------------------------------------------- grouped cases
// The thread and shm suites run the short count cases of one (kind, ranks, algorithm) as one
// test on one communicator: a test's fixed cost (a process, a group of ranks, a segment) then
// comes once instead of five times, and the calls in a row prove the ranks stay in step. The
// long cases stay tests of their own. A failure names its count case. The shm suite, whose
// fixed cost is the largest (p processes, a segment of p^2 links), runs the few and the tiny
// segments as one group ("small").
enum class CountGroup { kFew, kTinySegments, kBig, kSmall };

// The count cases of a group. The sanitizer builds (SmallScale()) and the sleep-checked runs
// leave out zero, eight and a thousand (see tests/CMakeLists.txt).
inline std::vector<CountCase> CasesOf(CountGroup group) {
  switch (group) {
    case CountGroup::kFew: {
      std::vector<CountCase> few;
      for (CountCase c : {CountCase::kZero, CountCase::kOne, CountCase::kSeven, CountCase::kEight,
                          CountCase::kThousand}) {
        if (!SmallScale() || SanitizersRun(c)) few.push_back(c);
      }
      return few;
    }
    case CountGroup::kTinySegments:
      return {CountCase::kTinySegments};
    case CountGroup::kBig:
      return {CountCase::kBig};
    case CountGroup::kSmall: {
      std::vector<CountCase> small = CasesOf(CountGroup::kFew);
      small.push_back(CountCase::kTinySegments);
      return small;
    }
  }
  return {};
}

struct MatrixGroupParam {
  CollectiveKind kind;
  int ranks;
  CountGroup group;
  std::string algorithm;
};

inline std::string MatrixGroupName(const MatrixGroupParam& m) {
  static const char* kGroups[] = {"few", "tinysegments", "big", "small"};
  return std::string(CollectiveKindName(m.kind)) + "_" + m.algorithm + "_p" +
         std::to_string(m.ranks) + "_" + kGroups[static_cast<int>(m.group)];
}

inline void PrintTo(const MatrixGroupParam& m, std::ostream* os) { *os << MatrixGroupName(m); }

// Every algorithm of every collective at each rank count and count group (a barrier has no
// counts: the first group alone, which runs it once per case). `grouping`: few, tiny segments
// and big, or small (few and tiny segments together) and big.
enum class Grouping { kThree, kSmallAndBig };

inline std::vector<MatrixGroupParam> MatrixGroupParams(const std::vector<int>& ranks,
                                                       Grouping grouping = Grouping::kThree) {
  const std::vector<CountGroup> groups =
      grouping == Grouping::kThree
          ? std::vector<CountGroup>{CountGroup::kFew, CountGroup::kTinySegments, CountGroup::kBig}
          : std::vector<CountGroup>{CountGroup::kSmall, CountGroup::kBig};
  std::vector<MatrixGroupParam> params;
  for (const internal::AlgorithmInfo& algorithm : internal::Algorithms()) {
    const bool counted = internal::Collective(algorithm.kind).counts != internal::Counts::kNone;
    for (int p : ranks) {
      for (CountGroup g : groups) {
        if (!counted && g != groups.front()) continue;
        params.push_back({algorithm.kind, p, g, std::string(algorithm.name)});
      }
    }
  }
  return params;
}

// Runs every case of group `m` on this rank, in order; returns one line per problem, each
// naming its case. Stops at the first case that failed the group.
inline std::vector<std::string> RunMatrixGroup(Communicator& comm, const MatrixGroupParam& m) {
  std::vector<std::string> errors;
  const bool counted = internal::Collective(m.kind).counts != internal::Counts::kNone;
  for (CountCase count : CasesOf(m.group)) {
    const MatrixParam one{m.kind, m.ranks, count, m.algorithm};
    std::vector<std::string> case_errors = RunMatrixCase(comm, one);
    for (std::string& e : case_errors) errors.push_back(MatrixName(one) + ": " + e);
    if (!case_errors.empty() || !counted) break;  // a barrier: one case is the whole test
  }
  return errors;
}

}  // namespace chorus::testing
