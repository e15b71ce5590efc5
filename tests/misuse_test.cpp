// Misuse answered alike on every rank, on every transport: a rank that rejects its arguments,
// ranks that disagree on the call, a zero count against a non-zero one, bad options. The code
// alone tells every rank whether the communicator is still usable: kInvalidArgument means it
// is (every rank abandoned the call), anything else means it is failed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chorus/chorus.h"
#include "support/group.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using testing::RunGroup;

std::string Expect(bool ok, const std::string& what) { return ok ? "" : what + "\n"; }

std::string Check(const Status& s, StatusCode code, const std::string& needle,
                  const std::string& what) {
  if (s.code() == code && s.message().find(needle) != std::string::npos) return "";
  return what + ": expected " + std::string(StatusCodeName(code)) + " with \"" + needle +
         "\", got " + s.ToString() + "\n";
}

std::string Join(const std::vector<std::string>& reports) {
  std::string all;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (!reports[r].empty()) all += "rank " + std::to_string(r) + ": " + reports[r] + "\n";
  }
  return all;
}

class Misuse : public ::testing::TestWithParam<TransportKind> {
 protected:
  CommOptions Options(milliseconds timeout = std::chrono::seconds(20)) const {
    return {.timeout = timeout, .wait = testing::TestWaitMode()};
  }
};

// Rank 0 rejects call #0 (a null buffer) and goes straight on to call #1; the others enter
// call #0 only afterwards. Every rank gets kInvalidArgument for call #0 (the peers' names
// rank 0 and its reason), and call #1 then runs correctly everywhere: the communicator stays
// usable. Ten rounds, each with the rejecting rank far ahead.
TEST_P(Misuse, RejectedCallIsAbandonedByEveryRankAndTheNextCallWorks) {
  constexpr int kRanks = 4;
  const auto reports = RunGroup(
      GetParam(), kRanks,
      [](Communicator& comm) -> std::string {
        std::string problems;
        for (int round = 0; round < 10; ++round) {
          std::vector<float> v(64, float(comm.rank() + 1));
          Status first;
          if (comm.rank() == 0) {
            first = comm.AllReduce({nullptr, 64, DataType::kFloat32},
                                   {v.data(), 64, DataType::kFloat32}, ReduceOp::kSum);
            problems += Check(first, StatusCode::kInvalidArgument, "send.data is null",
                              "round " + std::to_string(round) + " rejecting rank");
          } else {
            std::this_thread::sleep_for(milliseconds(round % 2 == 0 ? 50 : 0));
            first = comm.AllReduce(std::span<float>(v), ReduceOp::kSum);
            problems += Check(first, StatusCode::kInvalidArgument,
                              "rank 0 rejected this call (allreduce: send.data is null",
                              "round " + std::to_string(round) + " peer");
            v.assign(64, float(comm.rank() + 1));
          }
          const Status second = comm.AllReduce(std::span<float>(v), ReduceOp::kSum);
          problems +=
              Check(second, StatusCode::kOk, "", "round " + std::to_string(round) + " next call");
          problems += Expect(v == std::vector<float>(64, 10.0f),
                             "round " + std::to_string(round) + ": wrong sum after a rejection");
          if (!second.ok()) return problems;
        }
        problems += Expect(comm.health().ok(), "health: " + comm.health().ToString());
        return problems;
      },
      Options());
  EXPECT_EQ(Join(reports), "");
}

// Rank 1 passes count 0 where the others pass 8. It must not return at once: every rank meets
// the mismatch in this call and fails with kFailedPrecondition; the communicator is failed.
TEST_P(Misuse, ZeroCountOnOneRankFailsTheCallOnEveryRank) {
  const auto start = std::chrono::steady_clock::now();
  const auto reports = RunGroup(
      GetParam(), 3,
      [](Communicator& comm) -> std::string {
        std::vector<float> v(8, 1.0f);
        const size_t n = comm.rank() == 1 ? 0 : 8;
        const Status s = comm.AllReduce({v.data(), n, DataType::kFloat32},
                                        {v.data(), n, DataType::kFloat32}, ReduceOp::kSum);
        return Check(s, StatusCode::kFailedPrecondition, "ranks disagree on the call", "call") +
               Check(comm.health(), StatusCode::kFailedPrecondition, "count 0", "health");
      },
      Options());
  EXPECT_EQ(Join(reports), "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Every rank rejects the same call: nothing moves, nothing waits, the communicator is usable.
TEST_P(Misuse, CallRejectedByEveryRankLeavesTheCommunicatorUsable) {
  const auto reports = RunGroup(
      GetParam(), 3,
      [](Communicator& comm) -> std::string {
        std::vector<float> v(9, 1.0f);
        const Status bad =
            comm.AllGather({v.data(), 3, DataType::kFloat32}, {v.data(), 8, DataType::kFloat32});
        std::vector<float> w(6, 1.0f);
        const Status good = comm.AllReduce(std::span<float>(w), ReduceOp::kSum);
        return Check(bad, StatusCode::kInvalidArgument, "recv.count (8) != size (3)", "bad") +
               Check(good, StatusCode::kOk, "", "next call") +
               Expect(w == std::vector<float>(6, 3.0f), "wrong sum");
      },
      Options());
  EXPECT_EQ(Join(reports), "");
}

// Ranks that disagree on the count, the collective, the type or the op: kFailedPrecondition on
// every rank, both sides named, and the communicator failed with the same code.
TEST_P(Misuse, RanksThatDisagreeOnTheCallGetFailedPreconditionEverywhere) {
  struct Case {
    const char* name;
    Status (*call)(Communicator&);
  };
  const Case cases[] = {
      {"count",
       [](Communicator& c) {
         std::vector<float> v(c.rank() == 0 ? 16 : 8, 1.0f);
         return c.AllReduce(std::span<float>(v), ReduceOp::kSum);
       }},
      {"collective",
       [](Communicator& c) {
         std::vector<float> a(8, 1.0f), b(8 * static_cast<size_t>(c.size()));
         return c.rank() == 0 ? c.AllReduce(std::span<float>(a), ReduceOp::kSum)
                              : c.AllGather(std::span<const float>(a), std::span<float>(b));
       }},
      {"barrier",  // a flag barrier on thread and shm ranks sends nothing: it reads the tag
       [](Communicator& c) {
         std::vector<float> v(8, 1.0f);
         return c.rank() == 0 ? c.Barrier() : c.AllReduce(std::span<float>(v), ReduceOp::kSum);
       }},
      {"dtype",
       [](Communicator& c) {
         std::vector<int32_t> v(8, 1);
         return c.AllReduce({v.data(), 8, c.rank() == 0 ? DataType::kInt32 : DataType::kFloat32},
                            {v.data(), 8, c.rank() == 0 ? DataType::kInt32 : DataType::kFloat32},
                            ReduceOp::kSum);
       }},
      {"op",
       [](Communicator& c) {
         std::vector<float> v(8, 1.0f);
         return c.AllReduce(std::span<float>(v), c.rank() == 0 ? ReduceOp::kMax : ReduceOp::kSum);
       }},
  };
  for (const Case& c : cases) {
    const auto reports = RunGroup(
        GetParam(), 2,
        [&](Communicator& comm) -> std::string {
          const Status s = c.call(comm);
          return Check(s, StatusCode::kFailedPrecondition, "ranks disagree on the call", c.name) +
                 Check(comm.health(), StatusCode::kFailedPrecondition, "disagree",
                       std::string(c.name) + " health");
        },
        Options());
    EXPECT_EQ(Join(reports), "") << c.name;
  }
}

// A root outside the group is the rejecting rank's mistake: it gets kInvalidArgument, and so
// does every rank that needed it in the call (a broadcast's root and the ranks it reaches
// through it); a rank that needed nothing from it may complete the call, with the right data.
// Every rank abandons nothing else: the calls after it work everywhere.
TEST_P(Misuse, ARootOutsideTheGroupIsRejectedAndTheNextCallsWork) {
  const auto reports = RunGroup(
      GetParam(), 3,
      [](Communicator& comm) -> std::string {
        std::vector<float> v(8, float(comm.rank()));
        const int root = comm.rank() == 1 ? 3 : 0;
        const Status s = comm.Broadcast(std::span<float>(v), root);
        std::string problems;
        if (comm.rank() == 1) {
          problems += Check(s, StatusCode::kInvalidArgument, "root (3) must be in [0, size (3))",
                            "broadcast with root 3");
        } else if (!s.ok()) {
          problems += Check(s, StatusCode::kInvalidArgument, "rank 1", "broadcast beside it");
        } else {
          problems += Expect(v == std::vector<float>(8, 0.0f), "completed with the wrong data");
        }
        problems += Expect(comm.Barrier().ok(), "the barrier after it failed");
        std::vector<float> r(8, 1.0f);
        const Status reduced = comm.Reduce(std::span<float>(r), ReduceOp::kSum, 2);
        problems += Expect(reduced.ok() && (comm.rank() != 2 || r == std::vector<float>(8, 3.0f)),
                           "the reduce after it: " + reduced.ToString());
        return problems;
      },
      Options());
  EXPECT_EQ(Join(reports), "");
}

// Ranks that pass different roots: the first message that crosses carries its sender's root,
// and its receiver fails the group with kFailedPrecondition naming both calls. A rank that had
// sent all it had to (a root over TCP) may have returned first; its next call fails with it.
TEST_P(Misuse, RanksThatDisagreeOnTheRootGetFailedPreconditionEverywhere) {
  const auto reports = RunGroup(
      GetParam(), 3,
      [](Communicator& comm) -> std::string {
        std::vector<float> v(8, float(comm.rank()));
        const int root = comm.rank() == 1 ? 1 : 0;  // rank 1 thinks it is the root
        Status s = comm.Broadcast(std::span<float>(v), root, {.algorithm = "chain"});
        if (s.ok()) s = comm.Barrier();
        // Over TCP the failure floods along the links that are up; a rank not yet connected to
        // the ranks that know it may instead find one of them gone, which it names.
        if (GetParam() == TransportKind::kTcp && s.code() == StatusCode::kUnavailable) {
          const bool named = s.message().find("rank 1 (") != std::string::npos ||
                             s.message().find("rank 2 (") != std::string::npos;
          return named ? "" : "a peer's exit, not named: " + s.ToString();
        }
        return Check(s, StatusCode::kFailedPrecondition, "ranks disagree on the call", "root") +
               Check(comm.health(), StatusCode::kFailedPrecondition, "disagree", "health");
      },
      Options());
  EXPECT_EQ(Join(reports), "");
}

// A rank that rejects its part of a rooted collective, late: every rank that waits for it gets
// kInvalidArgument naming it and its reason; a rank whose part needed nothing from it may
// finish its part, with the right data, and return OK. Either way the communicator is usable
// on every rank: the all-reduce after it works everywhere.
TEST_P(Misuse, ARankThatRejectsARootedCallLeavesEveryRankUsable) {
  constexpr int kRanks = 4;
  constexpr int kRejecting = 2;
  // Each call with rank kRejecting passing a null buffer where its part needs one; root 0.
  // `out` is the rank's output where it has one, else null.
  using Call = Status (*)(Communicator&, const float* in, float* out, float* scratch);
  const std::pair<const char*, Call> calls[] = {
      {"broadcast",
       [](Communicator& c, const float* in, float* out, float*) {
         return c.Broadcast({in, 8, DataType::kFloat32}, {out, 8, DataType::kFloat32}, 0);
       }},
      {"reduce",
       [](Communicator& c, const float* in, float* out, float*) {
         return c.Reduce({in, 8, DataType::kFloat32}, {out, 8, DataType::kFloat32}, ReduceOp::kSum,
                         0);
       }},
      {"gather",
       [](Communicator& c, const float* in, float*, float* scratch) {
         return c.Gather({in, 8, DataType::kFloat32}, {scratch, 32, DataType::kFloat32}, 0);
       }},
      {"scatter",
       [](Communicator& c, const float*, float* out, float* scratch) {
         return c.Scatter({scratch, 32, DataType::kFloat32}, {out, 8, DataType::kFloat32}, 0);
       }},
  };
  for (const auto& [name, call] : calls) {
    const auto reports = RunGroup(
        GetParam(), kRanks,
        [&, name = name, call = call](Communicator& comm) -> std::string {
          std::string problems;
          for (int round = 0; round < 2; ++round) {
            const std::string at = std::string(name) + " round " + std::to_string(round) + ": ";
            const bool rejecting = comm.rank() == kRejecting;
            std::vector<float> in(8, 1.0f), out(8, -1.0f), scratch(32, 1.0f);
            if (rejecting && round == 1) std::this_thread::sleep_for(milliseconds(50));
            const std::string how(name);
            // The rejecting rank's null: the input it contributes, or its output.
            const float* send =
                rejecting && (how == "reduce" || how == "gather") ? nullptr : in.data();
            float* recv =
                rejecting && (how == "broadcast" || how == "scatter") ? nullptr : out.data();
            const Status s = call(comm, send, recv, scratch.data());
            if (rejecting) {
              problems += Check(s, StatusCode::kInvalidArgument, "is null", at + "rejecting rank");
            } else if (!s.ok()) {
              problems += Check(s, StatusCode::kInvalidArgument,
                                "rank 2 rejected this call (" + how + ": ", at + "peer");
            } else if (how != "gather" && !(how == "reduce" && comm.rank() != 0)) {
              // Completed: its output is right (the reduce's and gather's are the root's alone,
              // and the root cannot complete without rank 2).
              problems += Expect(out == std::vector<float>(8, how == "reduce" ? 4.0f : 1.0f),
                                 at + "completed with the wrong data");
            }
            std::vector<float> v(6, float(comm.rank() + 1));
            const Status next = comm.AllReduce(std::span<float>(v), ReduceOp::kSum);
            problems += Check(next, StatusCode::kOk, "", at + "the all-reduce after it");
            problems += Expect(v == std::vector<float>(6, 10.0f), at + "wrong sum after it");
            if (!next.ok()) return problems;
          }
          return problems;
        },
        Options());
    EXPECT_EQ(Join(reports), "") << name;
  }
}

// Ranks that pass different roots to each rooted collective, where no message may ever show
// it: in a Reduce or Gather whose roots differ, the two would-be roots wait on each other. A
// rank whose wait lasts glances at the group (Transport::Glance) and finds the other root in
// the same call, so every rank fails with kFailedPrecondition naming both calls, long before
// the deadline: in this call, or in the next one for a rank that had done its part.
TEST_P(Misuse, RanksThatDisagreeOnTheRootOfAnyRootedCollectiveFailEverywhere) {
  using Call = Status (*)(Communicator&, int root, float* a, float* b);
  const std::pair<const char*, Call> calls[] = {
      {"broadcast",
       [](Communicator& c, int root, float* a, float* b) {
         return c.Broadcast({a, 8, DataType::kFloat32}, {b, 8, DataType::kFloat32}, root);
       }},
      {"reduce",
       [](Communicator& c, int root, float* a, float* b) {
         return c.Reduce({a, 8, DataType::kFloat32}, {b, 8, DataType::kFloat32}, ReduceOp::kSum,
                         root);
       }},
      {"gather",
       [](Communicator& c, int root, float* a, float* b) {
         return c.Gather({a, 8, DataType::kFloat32},
                         {b, 8 * static_cast<size_t>(c.size()), DataType::kFloat32}, root);
       }},
      {"scatter",
       [](Communicator& c, int root, float* a, float* b) {
         return c.Scatter({a, 8 * static_cast<size_t>(c.size()), DataType::kFloat32},
                          {b, 8, DataType::kFloat32}, root);
       }},
      {"gatherv",
       [](Communicator& c, int root, float* a, float* b) {
         const std::vector<size_t> counts(static_cast<size_t>(c.size()), 8);
         return c.GatherV({a, 8, DataType::kFloat32},
                          {b, 8 * static_cast<size_t>(c.size()), DataType::kFloat32}, counts, root);
       }},
      {"scatterv",
       [](Communicator& c, int root, float* a, float* b) {
         const std::vector<size_t> counts(static_cast<size_t>(c.size()), 8);
         return c.ScatterV({a, 8 * static_cast<size_t>(c.size()), DataType::kFloat32}, counts,
                           {b, 8, DataType::kFloat32}, root);
       }},
  };
  for (const auto& [name, call] : calls) {
    const auto reports = RunGroup(
        GetParam(), 3,
        [&, call = call](Communicator& comm) -> std::string {
          std::vector<float> a(24, 1.0f), b(24, 0.0f);
          const int root = comm.rank() == 1 ? 1 : 0;  // rank 1 thinks it is the root
          Status s = call(comm, root, a.data(), b.data());
          if (s.ok()) s = comm.Barrier();
          if (GetParam() == TransportKind::kTcp && s.code() == StatusCode::kUnavailable) {
            const bool named = s.message().find("rank 1 (") != std::string::npos ||
                               s.message().find("rank 2 (") != std::string::npos;
            return named ? "" : "a peer's exit, not named: " + s.ToString();
          }
          return Check(s, StatusCode::kFailedPrecondition, "ranks disagree on the call", name) +
                 Check(comm.health(), StatusCode::kFailedPrecondition, "disagree",
                       std::string(name) + " health");
        },
        Options());
    EXPECT_EQ(Join(reports), "") << name;
  }
}

// RejectCall (for bindings that check what the library cannot see): the rejecting rank and
// every peer that enters the call get kInvalidArgument with the reason and the rank's name; the
// next call works.
TEST_P(Misuse, RejectCallIsAnsweredOnEveryRankAndLeavesTheCommunicatorUsable) {
  const auto reports = RunGroup(
      GetParam(), 3,
      [](Communicator& comm) -> std::string {
        std::vector<float> v(5, float(comm.rank() + 1));
        std::string problems;
        if (comm.rank() == 1) {
          problems +=
              Check(comm.RejectCall(CollectiveKind::kAllReduce, "recv is read-only"),
                    StatusCode::kInvalidArgument, "allreduce: recv is read-only", "rejecting rank");
        } else {
          problems += Check(comm.AllReduce(std::span<float>(v), ReduceOp::kSum),
                            StatusCode::kInvalidArgument,
                            "rank 1 rejected this call (allreduce: recv is read-only", "peer");
        }
        v.assign(5, float(comm.rank() + 1));
        problems += Check(comm.AllReduce(std::span<float>(v), ReduceOp::kSum), StatusCode::kOk, "",
                          "next call");
        problems += Expect(v == std::vector<float>(5, 6.0f), "wrong sum after RejectCall");
        problems += Check(comm.RejectCall(static_cast<CollectiveKind>(200), "x"),
                          StatusCode::kInvalidArgument, "is not a chorus::CollectiveKind", "kind");
        return problems;
      },
      Options());
  EXPECT_EQ(Join(reports), "");
}

TEST(RejectCall, AFailedCommunicatorReturnsItsFailure) {
  auto group = CreateLocalGroup(1);
  ASSERT_TRUE(group.ok()) << group.status();
  Communicator& comm = (*group)[0];
  comm.Abort();
  const Status s = comm.RejectCall(CollectiveKind::kBarrier, "late");
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("Abort() was called"));
}

// A communicator remembers its last few valid calls and skips checking and selection when the
// same arguments come again. Six shapes over the same two buffers, more than it remembers and
// each differing from another in one argument only (the count, the op, in place, the
// collective, the dtype), give exact results round after round; and a repeat with one argument
// or option made invalid is still refused, on every rank alike, and the next call works.
TEST_P(Misuse, RepeatedCallsAreCheckedAsTheFirstWasAndComputeExactly) {
  const auto reports = RunGroup(
      GetParam(), 3,
      [](Communicator& comm) -> std::string {
        constexpr size_t n = 12;
        const float me = float(comm.rank() + 1);  // 1, 2, 3: sum 6, max 3
        alignas(8) float a[n];
        alignas(8) float b[n];
        auto* ai = reinterpret_cast<int32_t*>(a);
        auto* bi = reinterpret_cast<int32_t*>(b);
        const auto f32 = [](void* d, size_t count) {
          return MutableBuffer{d, count, DataType::kFloat32};
        };
        const auto in = [](const void* d, size_t count, DataType t = DataType::kFloat32) {
          return ConstBuffer{d, count, t};
        };
        std::string problems;
        for (int round = 0; round < 4; ++round) {
          const std::string at = "round " + std::to_string(round) + ": ";
          const auto ok = [&](const Status& s, const std::string& what) {
            problems += Check(s, StatusCode::kOk, "", at + what);
          };
          const auto all = [&](const float* v, size_t count, float want, const std::string& what) {
            for (size_t i = 0; i < count; ++i) {
              if (v[i] != want) {
                problems += at + what + ": [" + std::to_string(i) + "] = " + std::to_string(v[i]) +
                            ", want " + std::to_string(want) + "\n";
                return;
              }
            }
          };
          std::fill_n(a, n, me);
          std::fill_n(b, n, -1.0f);
          ok(comm.AllReduce(in(a, n), f32(b, n), ReduceOp::kSum), "sum");
          all(b, n, 6.0f, "sum");
          std::fill_n(b, n, -1.0f);
          ok(comm.AllReduce(in(a, n / 2), f32(b, n / 2), ReduceOp::kSum), "half count");
          all(b, n / 2, 6.0f, "half count");
          all(b + n / 2, n / 2, -1.0f, "beyond the half count");
          ok(comm.AllReduce(in(a, n), f32(b, n), ReduceOp::kMax), "max");
          all(b, n, 3.0f, "max");
          std::fill_n(b, n, me);
          ok(comm.AllReduce(in(b, n), f32(b, n), ReduceOp::kSum), "in place");
          all(b, n, 6.0f, "in place");
          std::fill_n(b, n, -1.0f);
          ok(comm.AllGather(in(a, n / 3), f32(b, n)), "all-gather");
          for (int r = 0; r < 3; ++r) all(b + r * n / 3, n / 3, float(r + 1), "all-gather");
          std::fill_n(ai, n, comm.rank() + 1);
          ok(comm.AllReduce(in(a, n, DataType::kInt32), {b, n, DataType::kInt32}, ReduceOp::kSum),
             "int32 sum");
          problems += Expect(std::count(bi, bi + n, 6) == n, at + "int32 sum wrong");
        }
        // The last calls again, each with one thing made wrong: refused as a first call is.
        std::fill_n(a, n, me);
        problems += Check(comm.AllReduce(in(a, n), f32(nullptr, n), ReduceOp::kSum),
                          StatusCode::kInvalidArgument, "recv.data is null", "null recv");
        problems += Check(comm.AllReduce(in(a, n), f32(b, n), ReduceOp::kSum,
                                         {.timeout = std::chrono::milliseconds(0)}),
                          StatusCode::kInvalidArgument, "options.timeout (0 ms)", "zero timeout");
        problems += Check(
            comm.AllReduce(in(a, n), f32(b, n), ReduceOp::kSum, {.segment_bytes = size_t{1} << 40}),
            StatusCode::kInvalidArgument, "options.segment_bytes", "huge segment");
        problems +=
            Check(comm.AllReduce(in(a, n), f32(b, n), ReduceOp::kSum, {.algorithm = "bogus"}),
                  StatusCode::kInvalidArgument, "bogus", "unknown algorithm");
        problems += Check(comm.AllReduce(in(a, n), f32(b, n + 1), ReduceOp::kSum),
                          StatusCode::kInvalidArgument, "recv.count (13) != send.count (12)",
                          "count mismatch");
        std::fill_n(b, n, -1.0f);
        problems += Check(comm.AllReduce(in(a, n), f32(b, n), ReduceOp::kSum, {.segment_bytes = 8}),
                          StatusCode::kOk, "", "after the refusals");
        for (size_t i = 0; i < n; ++i) {
          if (b[i] != 6.0f) return problems + "after the refusals: wrong sum\n";
        }
        return problems;
      },
      Options());
  EXPECT_EQ(Join(reports), "");
}

INSTANTIATE_TEST_SUITE_P(Transports, Misuse,
                         ::testing::Values(TransportKind::kThread, TransportKind::kShm,
                                           TransportKind::kTcp),
                         [](const auto& param_info) {
                           return testing::TransportParamName(param_info.param);
                         });

// Every code status.h lists, against CommunicatorUsableAfter, and each code a call can return
// produced for real on thread ranks: the next valid call on that communicator works exactly
// when the code says it is usable, and otherwise returns the same failure, as health() does.
TEST(StatusCodes, EachCodeTellsWhetherTheCommunicatorIsStillUsable) {
  for (StatusCode code :
       {StatusCode::kOk, StatusCode::kInvalidArgument, StatusCode::kDeadlineExceeded,
        StatusCode::kUnavailable, StatusCode::kAborted, StatusCode::kFailedPrecondition,
        StatusCode::kUnimplemented, StatusCode::kInternal}) {
    const bool usable = code == StatusCode::kOk || code == StatusCode::kInvalidArgument;
    EXPECT_EQ(CommunicatorUsableAfter(code), usable) << StatusCodeName(code);
  }
  // Each case makes a 2-rank group, lets `fail` produce a failure on rank 0 (rank 1 does what
  // the case needs), and then checks rank 0's next call against the code.
  auto check = [](StatusCode want, const std::function<Status(Communicator&, int)>& fail) {
    auto group =
        CreateLocalGroup(2, {.timeout = milliseconds(20000), .wait = testing::TestWaitMode()});
    ASSERT_TRUE(group.ok()) << group.status();
    std::vector<Status> first(2);
    std::vector<Status> next(2);
    testing::RunRanks(*group, [&](Communicator& comm) {
      const auto r = static_cast<size_t>(comm.rank());
      first[r] = fail(comm, comm.rank());
      std::vector<int32_t> v(4, comm.rank() + 1);
      // Rank 1 joins the next call only where the group is still usable.
      if (comm.rank() == 0 || CommunicatorUsableAfter(want)) {
        next[r] = comm.AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
        if (next[r].ok() && v != std::vector<int32_t>(4, 3)) next[r] = Internal("wrong sum");
      }
    });
    EXPECT_EQ(first[0].code(), want) << first[0];
    if (CommunicatorUsableAfter(first[0].code())) {
      EXPECT_TRUE(next[0].ok()) << "after " << first[0] << ": " << next[0];
      EXPECT_TRUE((*group)[0].health().ok());
    } else {
      EXPECT_EQ(next[0], first[0]) << "a failed communicator returns its failure again";
      EXPECT_EQ((*group)[0].health(), first[0]);
    }
  };
  std::vector<float> data(8, 1.0f);
  // A rejected call: both ranks abandon it.
  check(StatusCode::kInvalidArgument, [&](Communicator& comm, int rank) {
    std::vector<float> mine(data);
    return rank == 0 ? comm.AllReduce(ConstBuffer{nullptr, 8, DataType::kFloat32},
                                      MakeBuffer(std::span<float>(mine)), ReduceOp::kSum)
                     : comm.AllReduce(std::span<float>(mine), ReduceOp::kSum);
  });
  // Ranks in different collectives.
  check(StatusCode::kFailedPrecondition, [&](Communicator& comm, int rank) {
    std::vector<float> mine(data);
    std::vector<float> out(16);
    return rank == 0 ? comm.AllReduce(std::span<float>(mine), ReduceOp::kSum)
                     : comm.AllGather(std::span<const float>(mine), std::span<float>(out));
  });
  // Rank 1 never enters the call.
  check(StatusCode::kDeadlineExceeded, [&](Communicator& comm, int rank) {
    std::vector<float> mine(data);
    if (rank == 1) return Status::Ok();
    return comm.AllReduce(std::span<float>(mine), ReduceOp::kSum, {.timeout = milliseconds(200)});
  });
  // Rank 1 aborts the group.
  check(StatusCode::kAborted, [&](Communicator& comm, int rank) {
    std::vector<float> mine(data);
    if (rank == 1) {
      comm.Abort();
      return Status::Ok();
    }
    return comm.AllReduce(std::span<float>(mine), ReduceOp::kSum);
  });
}

TEST(BadOptions, AnUnknownAlgorithmIsRefusedWhenTheCommunicatorIsMade) {
  const auto local = CreateLocalGroup(2, {.algorithm = "bogus"});
  EXPECT_EQ(local.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(local.status().message(),
              HasSubstr("CreateLocalGroup: options.algorithm (\"bogus\") is not one of: "));
  EXPECT_THAT(local.status().message(), HasSubstr("ring"));
  CommOptions o{.algorithm = "bogus"};
  o.rank = 0;
  o.size = 1;
  o.store = MakeHashStore();
  const auto created = Communicator::Create(o);
  EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("Create: options.algorithm (\"bogus\")"));
  EXPECT_TRUE(CreateLocalGroup(2, {.algorithm = "ring"}).ok());
}

TEST(BadOptions, AnUnknownWaitModeIsRefused) {
  const auto local = CreateLocalGroup(2, {.wait = static_cast<WaitMode>(9)});
  EXPECT_EQ(local.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(local.status().message(), HasSubstr("options.wait (9) is not a chorus::WaitMode"));
}

TEST(BadOptions, UnknownSlotStoresAreRefused) {
  const auto local = CreateLocalGroup(2, {.slot_stores = static_cast<SlotStores>(7)});
  EXPECT_EQ(local.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(local.status().message(),
              HasSubstr("options.slot_stores (7) is not a chorus::SlotStores"));
  EXPECT_TRUE(CreateLocalGroup(2, {.slot_stores = SlotStores::kStream}).ok());
}

}  // namespace
}  // namespace chorus
