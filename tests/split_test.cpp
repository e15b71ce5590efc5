// Communicator::Split and Shrink on thread, shm and TCP ranks, and Split on fake hosts (hybrid):
// the groups, ranks and sizes colors and keys make; exact collectives and messages in the new
// communicators interleaved with the old; a rank with no color; a bad color refused everywhere;
// a rank in another call; new communicators that fail, and outlive their parent, on their own;
// a shrink past a rank that left, and shrinks' lists checked.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "support/group.h"

namespace chorus {
namespace {

CommOptions Base() {
  CommOptions o;
  o.wait = testing::TestWaitMode();
  return o;
}

std::string Describe(const Status& s) { return s.ok() ? "" : s.ToString() + "; "; }

// "" when `sub` is the communicator of `members` (ranks of the parent, in their new order):
// its rank and size, an all-gather of parent ranks in new rank order, an all-reduce of them,
// and a message around it.
std::string CheckGroup(Communicator& sub, int parent_rank, const std::vector<int>& members) {
  std::string e;
  const int n = static_cast<int>(members.size());
  const int expected_rank =
      static_cast<int>(std::find(members.begin(), members.end(), parent_rank) - members.begin());
  if (sub.size() != n) e += "size " + std::to_string(sub.size()) + "; ";
  if (sub.rank() != expected_rank) e += "rank " + std::to_string(sub.rank()) + "; ";
  if (!e.empty()) return e;
  const int32_t mine = parent_rank;
  std::vector<int32_t> all(static_cast<size_t>(n), -1);
  e += Describe(sub.AllGather(std::span<const int32_t>(&mine, 1), std::span<int32_t>(all)));
  for (int i = 0; i < n; ++i) {
    if (all[static_cast<size_t>(i)] != members[static_cast<size_t>(i)]) {
      e += "all-gather block " + std::to_string(i) + " is " +
           std::to_string(all[static_cast<size_t>(i)]) + "; ";
    }
  }
  std::vector<int32_t> sum(1000);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = parent_rank * 1000 + static_cast<int32_t>(i);
  e += Describe(sub.AllReduce(std::span<int32_t>(sum), ReduceOp::kSum));
  int32_t ranks = 0;
  for (int m : members) ranks += m;
  for (size_t i = 0; i < sum.size(); ++i) {
    if (sum[i] != ranks * 1000 + n * static_cast<int32_t>(i)) {
      e += "all-reduce element " + std::to_string(i) + " is " + std::to_string(sum[i]) + "; ";
      break;
    }
  }
  const int to = (sub.rank() + 1) % n;
  const int from = (sub.rank() + n - 1) % n;
  int32_t got = -1;
  e += Describe(sub.SendRecv(std::span<const int32_t>(&mine, 1), to, std::span<int32_t>(&got, 1),
                             from, {.tag = 9}));
  if (got != members[static_cast<size_t>(from)]) e += "message " + std::to_string(got) + "; ";
  return e;
}

// "" when an all-reduce of the parent's ranks on `comm` sums them.
std::string CheckParent(Communicator& comm) {
  int32_t x = comm.rank();
  std::string e = Describe(comm.AllReduce(std::span<int32_t>(&x, 1), ReduceOp::kSum));
  const int p = comm.size();
  if (e.empty() && x != p * (p - 1) / 2) e += "parent all-reduce " + std::to_string(x) + "; ";
  return e;
}

class Split : public ::testing::TestWithParam<TransportKind> {};

// Five ranks, two colors, keys that reverse the order: the even ranks (4, 2, 0) and the odd
// ones (3, 1), each on the transport the parent runs on, beside the parent.
TEST_P(Split, ColorsMakeGroupsAndKeysOrderThem) {
  const int p = 5;
  const TransportKind kind = GetParam();
  const auto reports = testing::RunGroup(
      kind, p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        auto sub = comm.Split(r % 2, -r);
        if (!sub.ok()) return "split: " + sub.status().ToString();
        if (!*sub) return "no communicator";
        Communicator& s = **sub;
        std::string e;
        if (s.transport() != kind) {
          e += "transport " + std::string(TransportKindName(s.transport())) + "; ";
        }
        const std::vector<int> members =
            r % 2 == 0 ? std::vector<int>{4, 2, 0} : std::vector<int>{3, 1};
        e += CheckParent(comm);
        e += CheckGroup(s, r, members);
        e += CheckParent(comm);
        e += CheckGroup(s, r, members);
        return e;
      },
      Base());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A rank that passes kNoColor gets no communicator; the others one of three. Equal keys keep
// the parent's order. Split(0, rank) duplicates, and a duplicate splits again: three
// communicators used in turn, with a message sent on one before a collective of another.
TEST_P(Split, NoColorDuplicateAndNested) {
  const int p = 4;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        std::string e;
        auto some = comm.Split(r == 2 ? Communicator::kNoColor : 7, 0);
        if (!some.ok()) return "split: " + some.status().ToString();
        if (r == 2) {
          if (*some) e += "rank 2 got a communicator; ";
        } else if (!*some) {
          e += "no communicator; ";
        } else {
          e += CheckGroup(**some, r, {0, 1, 3});
        }
        auto dup = comm.Split(0, r);
        if (!dup.ok() || !*dup) return e + "dup: " + dup.status().ToString();
        Communicator& d = **dup;
        auto pairs = d.Split(r / 2, r);
        if (!pairs.ok() || !*pairs) return e + "pairs: " + pairs.status().ToString();
        const int32_t note = 100 + r;
        e += Describe(d.Send(std::span<const int32_t>(&note, 1), (r + 1) % p));
        e += CheckGroup(**pairs, r, r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3});
        e += CheckParent(comm);
        int32_t got = -1;
        e += Describe(d.Recv(std::span<int32_t>(&got, 1), (r + p - 1) % p));
        if (got != 100 + (r + p - 1) % p) e += "dup's message " + std::to_string(got) + "; ";
        e += CheckGroup(d, r, {0, 1, 2, 3});
        return e;
      },
      Base());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A color below kNoColor on one rank: every rank gets kInvalidArgument, the parent stays usable,
// and the next split (numbered alike on every rank) works, also after a rank refused the split
// through RejectCall, as a binding does for an argument it cannot pass on.
TEST_P(Split, BadColorIsRefusedOnEveryRank) {
  const int p = 3;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        std::string e;
        auto bad = comm.Split(r == 1 ? -7 : 0, 0);
        if (bad.ok()) {
          e += "bad split went ahead; ";
        } else if (bad.status().code() != StatusCode::kInvalidArgument ||
                   bad.status().message().find("color") == std::string::npos ||
                   (r != 1 && bad.status().message().find("rank 1") == std::string::npos)) {
          e += "bad split: " + bad.status().ToString() + "; ";
        }
        const Status refused = r == 2 ? comm.RejectCall(CollectiveKind::kAllGather, "a bad key")
                                      : comm.Split(0, 0).status();
        if (refused.code() != StatusCode::kInvalidArgument) {
          e += "refused split: " + refused.ToString() + "; ";
        }
        e += Describe(comm.health());
        e += CheckParent(comm);
        auto good = comm.Split(0, 0);
        if (!good.ok() || !*good) return e + "good split: " + good.status().ToString();
        e += CheckGroup(**good, r, {0, 1, 2});
        return e;
      },
      Base());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// An aborted new communicator fails alone: its ranks' calls return kAborted, the parent and the
// other group go on. Then the parent is destroyed and the new communicators go on without it.
TEST_P(Split, NewCommunicatorsFailAndOutliveTheParentAlone) {
  const int p = 4;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        std::string e;
        auto halves = comm.Split(r / 2, r);
        if (!halves.ok() || !*halves) return "halves: " + halves.status().ToString();
        auto evens = comm.Split(r % 2, r);
        if (!evens.ok() || !*evens) return "evens: " + evens.status().ToString();
        Communicator& h = **halves;
        if (r == 0) h.Abort();
        if (r < 2) {
          int32_t x = 1;
          const Status s = h.AllReduce(std::span<int32_t>(&x, 1), ReduceOp::kSum);
          if (s.code() != StatusCode::kAborted) e += "aborted half: " + s.ToString() + "; ";
        } else {
          e += CheckGroup(h, r, {2, 3});
        }
        e += CheckParent(comm);
        e += Describe(comm.Barrier());
        {
          Communicator gone = std::move(comm);
        }
        e += CheckGroup(**evens, r, r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3});
        if (r >= 2) e += CheckGroup(h, r, {2, 3});
        return e;
      },
      Base());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A rank in an all-gather of the split's own shape, not in the split: both calls fail, naming
// the disagreement, and so does the communicator.
TEST_P(Split, ARankInAnotherCallOfTheSameShapeFailsTheGroup) {
  const int p = 2;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        if (comm.rank() == 0) {
          auto split = comm.Split(0, 0);
          if (split.ok() || split.status().code() != StatusCode::kFailedPrecondition ||
              split.status().message().find("disagree") == std::string::npos) {
            return "split: " + split.status().ToString();
          }
        } else {
          const int64_t mine[4] = {1, 2, 3, 4};
          int64_t all[8] = {};
          const Status s = comm.AllGather(std::span<const int64_t>(mine), std::span<int64_t>(all));
          if (s.code() != StatusCode::kFailedPrecondition ||
              s.message().find("a split's") == std::string::npos) {
            return "all-gather: " + s.ToString();
          }
        }
        return comm.health().ok() ? "healthy" : "";
      },
      Base());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// Rank 2 leaves (a process exits, a thread rank destroys its communicator); the others' call
// fails, and they go on in a communicator without it, made by Shrink on the failed one.
TEST_P(Split, ShrinkGoesOnWithoutARankThatLeft) {
  const int p = 4;
  const TransportKind kind = GetParam();
  CommOptions o = Base();
  o.timeout = std::chrono::seconds(60);
  const auto reports = testing::RunGroup(
      kind, p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        if (r == 2) {
          if (kind != TransportKind::kThread) _exit(0);
          Communicator gone = std::move(comm);
          return "";
        }
        std::string e;
        int32_t x = 1;
        const Status s = comm.AllReduce(std::span<int32_t>(&x, 1), ReduceOp::kSum);
        if (s.ok()) e += "the all-reduce without rank 2 went ahead; ";
        const int exclude[] = {2};
        auto rest = comm.Shrink(exclude);
        if (!rest.ok()) return e + "shrink: " + rest.status().ToString();
        if (rest->transport() != kind) e += "transport; ";
        e += CheckGroup(*rest, r, {0, 1, 3});
        if (comm.health().ok()) e += "the old communicator is healthy; ";
        return e;
      },
      o);
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// Shrink on a healthy communicator: bad lists refused (taking no number), a list in any order,
// ranks left out going on in the old communicator meanwhile; then ranks that disagree on the
// list time out (they meet apart, and cannot meet), and the old communicator fails too.
TEST_P(Split, ShrinkChecksItsListAndTheRanksAgree) {
  const int p = 4;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        std::string e;
        const auto refused = [&](std::vector<int> list, const char* text) {
          auto s = comm.Shrink(list);
          if (s.ok() || s.status().code() != StatusCode::kInvalidArgument ||
              s.status().message().find(text) == std::string::npos) {
            e += std::string(text) + ": " + s.status().ToString() + "; ";
          }
        };
        refused({4}, "not a rank in [0, 4)");
        refused({-1}, "not a rank in [0, 4)");
        refused({1, 1}, "twice");
        refused({r}, "this rank");
        if (r == 0 || r == 2) {
          const std::vector<int> list = r == 0 ? std::vector<int>{3, 1} : std::vector<int>{1, 3};
          auto pair = comm.Shrink(list);
          if (!pair.ok()) return e + "shrink: " + pair.status().ToString();
          e += CheckGroup(*pair, r, {0, 2});
        } else {
          const int32_t mine = r;
          int32_t got = -1;
          e += Describe(comm.SendRecv(std::span<const int32_t>(&mine, 1), 4 - r,
                                      std::span<int32_t>(&got, 1), 4 - r));
          if (got != 4 - r) e += "message " + std::to_string(got) + "; ";
        }
        e += CheckParent(comm);
        // Ranks 0 and 1 leave out rank 3, rank 2 leaves out rank 1.
        if (r != 3) {
          auto split = comm.Shrink(r == 2 ? std::vector<int>{1} : std::vector<int>{3},
                                   {.timeout = std::chrono::seconds(1)});
          if (split.ok() || split.status().code() != StatusCode::kDeadlineExceeded ||
              split.status().message().find("same ranks to exclude") == std::string::npos) {
            e += "disagreeing shrink: " + split.status().ToString() + "; ";
          }
          if (comm.health().code() != StatusCode::kDeadlineExceeded) {
            e += "old communicator after it: " + comm.health().ToString() + "; ";
          }
        }
        return e;
      },
      Base());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A shrink that failed on some ranks (one refused its list; another timed out waiting for it),
// then retried by all: the retry meets afresh. Then a second shrink with the same list.
TEST(SplitThreads, ShrinkRetriedAfterAFailedAttemptMeets) {
  auto group = CreateLocalGroup(4, Base());
  ASSERT_TRUE(group.ok()) << group.status();
  std::atomic<bool> timed_out{false};
  std::vector<std::string> reports(4);
  testing::RunRanks(*group, [&](Communicator& comm) {
    const int r = comm.rank();
    std::string& e = reports[static_cast<size_t>(r)];
    if (r == 3) return;  // left out
    if (r == 0) {
      if (comm.Shrink({3, 3}).status().code() != StatusCode::kInvalidArgument) e += "refusal; ";
      while (!timed_out.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else if (r == 1) {
      auto alone = comm.Shrink({3}, {.timeout = std::chrono::milliseconds(300)});
      if (alone.status().code() != StatusCode::kDeadlineExceeded) {
        e += "first attempt: " + alone.status().ToString() + "; ";
      }
      timed_out.store(true);
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto rest = comm.Shrink({3});
      if (!rest.ok()) {
        e += "shrink: " + rest.status().ToString() + "; ";
        return;
      }
      e += CheckGroup(*rest, r, {0, 1, 2});
    }
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(reports[static_cast<size_t>(r)], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Transports, Split,
                         ::testing::Values(TransportKind::kThread, TransportKind::kShm,
                                           TransportKind::kTcp),
                         [](const auto& param_info) {
                           return testing::TransportParamName(param_info.param);
                         });

// Ranks on two fake hosts (a UTS namespace each, as in tcp_test): the parent is hybrid, a
// split by host makes shared-memory communicators and a split across hosts TCP ones.
TEST(SplitHosts, ByHostMeetsOverSharedMemoryAndAcrossOverTcp) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a UTS namespace per fake host";
  const int p = 4;
  const testing::TempDir dir;
  const auto exits = testing::ForkRanks(p, [&](int rank) -> std::string {
    if (unshare(CLONE_NEWUTS) != 0) return "unshare";
    const std::string host = "chorus-split-host-" + std::to_string(rank / 2);
    if (sethostname(host.c_str(), host.size()) != 0) return "sethostname";
    CommOptions o = testing::GroupOptions(TransportKind::kAuto, rank, p, dir.url(), Base());
    o.listen = "127.0.0.1";
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    std::string e;
    if (comm->transport() != TransportKind::kTcp) e += "parent is not tcp; ";
    auto local = comm->Split(rank / 2, rank);
    auto across = comm->Split(rank % 2, rank);
    if (!local.ok() || !*local) return e + "local: " + local.status().ToString();
    if (!across.ok() || !*across) return e + "across: " + across.status().ToString();
    if ((*local)->transport() != TransportKind::kShm) e += "local is not shm; ";
    if ((*across)->transport() != TransportKind::kTcp) e += "across is not tcp; ";
    e += CheckGroup(**local, rank, rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3});
    e += CheckGroup(**across, rank,
                    rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3});
    e += CheckParent(*comm);
    return e;
  });
  for (size_t r = 0; r < exits.size(); ++r) {
    EXPECT_TRUE(exits[r].ok()) << "rank " << r << ": " << exits[r].report;
  }
}

}  // namespace
}  // namespace chorus
