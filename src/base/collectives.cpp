// The collective table (see collectives.h).
#include "base/collectives.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "base/check.h"
#include "base/hash.h"

namespace chorus::internal {
namespace {

double Share(int p) { return (p - 1.0) / p; }
double TwiceShare(int p) { return 2.0 * (p - 1.0) / p; }
double One(int) { return 1.0; }
double Zero(int) { return 0.0; }

// Where the moved blocks come from.
BlockSource EveryRanksSend(int, int j, int) { return {j, 0}; }      // all-gather, gather
BlockSource RootsSend(int, int, int root) { return {root, 0}; }     // broadcast
BlockSource RootsBlock(int r, int, int root) { return {root, r}; }  // scatter
BlockSource Transposed(int r, int j, int) { return {j, r}; }        // all-to-all

// clang-format off
constexpr std::array<CollectiveInfo, kNumCollectiveKinds> kCollectives = {{
  {CollectiveKind::kAllReduce, "allreduce", "allreduce", {"all_reduce", "", ""},
   /*reduces=*/true, /*rooted=*/false, /*send_only_at_root=*/false, /*recv_only_at_root=*/false,
   Counts::kSame, /*varied=*/false, Outcome::kCombined, /*source=*/nullptr,
   "recv.data == send.data", TwiceShare, TwiceShare},
  {CollectiveKind::kReduceScatter, "reducescatter", "reduce_scatter", {"reduce_scatter", "reduce_scatter_tensor", ""},
   true, false, false, false, Counts::kSendIsP, false, Outcome::kCombinedBlock, nullptr,
   "recv.data == send.data + rank * recv.count", Share, Share},
  {CollectiveKind::kAllGather, "allgather", "allgather", {"all_gather", "all_gather_into_tensor", ""},
   false, false, false, false, Counts::kRecvIsP, false, Outcome::kMoved, EveryRanksSend,
   "send.data == recv.data + rank * send.count", Share, Share},
  {CollectiveKind::kBroadcast, "broadcast", "broadcast", {"bcast", "", ""},
   false, true, true, false, Counts::kSame, false, Outcome::kMoved, RootsSend,
   "recv.data == send.data", One, One},
  {CollectiveKind::kReduce, "reduce", "reduce", {"", "", ""},
   true, true, false, true, Counts::kSame, false, Outcome::kCombinedAtRoot, nullptr,
   "recv.data == send.data", One, One},
  {CollectiveKind::kBarrier, "barrier", "barrier", {"", "", ""},
   false, false, false, false, Counts::kNone, false, Outcome::kNothing, nullptr,
   "", Zero, Zero},
  {CollectiveKind::kGather, "gather", "gather", {"", "", ""},
   false, true, false, true, Counts::kRecvIsP, false, Outcome::kMoved, EveryRanksSend,
   "send.data == recv.data + root * send.count on the root", Share, Share},
  {CollectiveKind::kScatter, "scatter", "scatter", {"", "", ""},
   false, true, true, false, Counts::kSendIsP, false, Outcome::kMoved, RootsBlock,
   "recv.data == send.data + root * recv.count on the root", Share, Share},
  {CollectiveKind::kAllToAll, "alltoall", "alltoall", {"all_to_all", "all_to_all_single", ""},
   false, false, false, false, Counts::kBothAreP, false, Outcome::kMoved, Transposed,
   "recv.data == send.data", Share, Share},
  {CollectiveKind::kAllGatherV, "allgatherv", "allgatherv", {"", "", ""},
   false, false, false, false, Counts::kRecvIsP, true, Outcome::kMoved, EveryRanksSend,
   "send.data == recv.data + the rank's block offset", Share, Share},
  {CollectiveKind::kReduceScatterV, "reducescatterv", "reduce_scatter_v", {"", "", ""},
   true, false, false, false, Counts::kSendIsP, true, Outcome::kCombinedBlock, nullptr,
   "recv.data == send.data + the rank's block offset", Share, Share},
  {CollectiveKind::kAllToAllV, "alltoallv", "alltoallv", {"", "", ""},
   false, false, false, false, Counts::kBothAreP, true, Outcome::kMoved, Transposed,
   "", Share, Share},
  {CollectiveKind::kGatherV, "gatherv", "gatherv", {"", "", ""},
   false, true, false, true, Counts::kRecvIsP, true, Outcome::kMoved, EveryRanksSend,
   "send.data == recv.data + the root's block offset on the root", Share, Share},
  {CollectiveKind::kScatterV, "scatterv", "scatterv", {"", "", ""},
   false, true, true, false, Counts::kSendIsP, true, Outcome::kMoved, RootsBlock,
   "recv.data == send.data + the root's block offset on the root", Share, Share},
}};
// clang-format on

constexpr bool InKindOrder() {
  for (size_t i = 0; i < kCollectives.size(); ++i) {
    if (static_cast<size_t>(kCollectives[i].kind) != i) return false;
  }
  return true;
}
static_assert(InKindOrder(), "kCollectives must list every CollectiveKind once, in order");

// A row says where moved blocks come from exactly when its outcome is kMoved.
constexpr bool SourcesWhereMoved() {
  for (const CollectiveInfo& c : kCollectives) {
    if ((c.outcome == Outcome::kMoved) != (c.source != nullptr)) return false;
  }
  return true;
}
static_assert(SourcesWhereMoved(), "a kMoved collective needs a source, and only it");

std::string Key(std::string_view name) {
  std::string key;
  for (char c : name) {
    if (c != '_' && c != '-') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return key;
}

}  // namespace

std::span<const CollectiveInfo> Collectives() { return kCollectives; }

const CollectiveInfo& Collective(CollectiveKind kind) {
  CHORUS_CHECK(IsCollective(static_cast<unsigned>(kind)));
  return kCollectives[static_cast<size_t>(kind)];
}

bool IsCollective(unsigned kind) { return kind < kCollectives.size(); }

std::optional<CollectiveKind> FindCollective(std::string_view name) {
  const std::string key = Key(name);
  if (key.empty()) return std::nullopt;
  for (const CollectiveInfo& c : kCollectives) {
    if (Key(c.name) == key) return c.kind;
    for (std::string_view alias : c.aliases) {
      if (!alias.empty() && Key(alias) == key) return c.kind;
    }
  }
  return std::nullopt;
}

CallCounts CountsFor(const CollectiveInfo& c, size_t block, int p) {
  CallCounts counts;
  counts.block = c.counts == Counts::kNone ? 0 : block;
  counts.send = counts.block * SendBlocks(c.counts, p);
  counts.recv = counts.block * RecvBlocks(c.counts, p);
  counts.total = std::max(counts.send, counts.recv);
  return counts;
}

bool CountsShared(const CollectiveInfo& c) {
  return c.varied && !c.rooted && c.counts != Counts::kBothAreP;
}

size_t BlockOffset(std::span<const size_t> counts, int j) {
  size_t offset = 0;
  for (int q = 0; q < j; ++q) offset += counts[static_cast<size_t>(q)];
  return offset;
}

size_t Sum(std::span<const size_t> counts) {
  return BlockOffset(counts, static_cast<int>(counts.size()));
}

uint64_t CountsDigest(std::span<const size_t> counts) {
  // FNV-1a over the counts as 64-bit words: ranks that pass different arrays differ here but
  // for a one-in-2^64 accident (and then the block lengths still fail the call).
  uint64_t h = kFnvBasis;
  for (size_t n : counts) {
    for (int byte = 0; byte < 8; ++byte) {
      h = FnvStep(h, static_cast<uint8_t>(static_cast<uint64_t>(n) >> (8 * byte)));
    }
  }
  return h;
}

CallCounts VariedCountsOf(const CollectiveInfo& c, const CallArgs& call, int rank) {
  CallCounts counts;
  const bool send_is_p = SendIsPerRank(c.counts);
  const bool recv_is_p = RecvIsPerRank(c.counts);
  const bool at_root = !c.rooted || rank == call.root;
  const auto own = [rank](std::span<const size_t> v) {
    return static_cast<size_t>(rank) < v.size() ? v[static_cast<size_t>(rank)] : 0;
  };
  // Off the root a rooted call's p-block buffer is not used; its one block is what it passed.
  counts.send = send_is_p              ? (at_root ? Sum(call.send_counts) : 0)
                : recv_is_p && at_root ? own(call.recv_counts)
                                       : call.send.count;
  counts.recv = recv_is_p              ? (at_root ? Sum(call.recv_counts) : 0)
                : send_is_p && at_root ? own(call.send_counts)
                                       : call.recv.count;
  if (CountsShared(c)) counts.total = Sum(send_is_p ? call.send_counts : call.recv_counts);
  return counts;
}

CallCounts CountsOf(const CollectiveInfo& c, size_t send_count, size_t recv_count, int p) {
  if (c.counts == Counts::kNone) return {};
  const bool from_recv = c.send_only_at_root || (!c.recv_only_at_root &&
                                                 RecvBlocks(c.counts, p) < SendBlocks(c.counts, p));
  // A block per rank, or one: no division for the one (a valid call's hot path).
  const size_t blocks = from_recv ? RecvBlocks(c.counts, p) : SendBlocks(c.counts, p);
  const size_t given = from_recv ? recv_count : send_count;
  const size_t block = blocks == 1 ? given : given / blocks;
  return CountsFor(c, block, p);
}
}  // namespace chorus::internal
