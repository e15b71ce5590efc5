// Per-rank bytes of the algorithms (see rank_bytes.h), one row per algorithm.
#include "model/rank_bytes.h"

#include <array>

#include "model/algorithm_cost.h"

namespace chorus::model {
namespace {

uint64_t Sum(std::span<const size_t> v) {
  uint64_t s = 0;
  for (size_t n : v) s += n;
  return s;
}

// One rank's call in elements.
struct Shape {
  int p;
  int r;
  int root;
  int v;                           // the rank's distance from the root, (r - root) mod p
  uint64_t n;                      // the even collectives' total buffer
  std::span<const size_t> counts;  // the shared counts, or this rank's send_counts
  std::span<const size_t> recv;    // all-to-all-v: this rank's recv_counts
  uint64_t total;                  // the sum of counts

  static int Mod(int a, int p) { return ((a % p) + p) % p; }
  // Block q (mod p) of the counts.
  uint64_t At(int q) const { return counts[static_cast<size_t>(Mod(q, p))]; }
  // Chunk c (mod p) of the ring partition of n: n / p, one more for the first n % p.
  uint64_t Chunk(int c) const {
    const auto u = static_cast<uint64_t>(p);
    return n / u + (static_cast<uint64_t>(Mod(c, p)) < n % u ? 1 : 0);
  }
  uint64_t Block() const { return n / static_cast<uint64_t>(p); }  // of even blocks
};

// Children of the rank at distance v from the root in the binomial tree (algo/rooted.h): v + 2^k
// for the powers of two below v's lowest set bit (below p for the root).
uint64_t BinomialChildren(int p, int v) {
  int low = 1;
  while (low < p) low <<= 1;
  if (v != 0) low = v & -v;
  uint64_t children = 0;
  for (int d = 1; d < low; d <<= 1) children += v + d < p ? 1 : 0;
  return children;
}

// --- the even collectives
// The ring (cost_model.h's per-rank model).
RankBytes Ring(const Shape& s, CollectiveKind kind) {
  const RingCost c = model::Ring(kind, s.p, s.r, s.n, DataType::kUint8);
  return {c.bytes_sent, c.bytes_received};
}
RankBytes RingAllReduce(const Shape& s) { return Ring(s, CollectiveKind::kAllReduce); }
RankBytes RingReduceScatter(const Shape& s) { return Ring(s, CollectiveKind::kReduceScatter); }
RankBytes RingAllGather(const Shape& s) { return Ring(s, CollectiveKind::kAllGather); }
// One-shot: the whole buffer to every peer and from every peer.
RankBytes EveryoneWhole(const Shape& s) { return {(s.p - 1) * s.n, (s.p - 1) * s.n}; }
// Direct all-reduce: the direct reduce-scatter over the ring's chunks, then the direct
// all-gather of the reduced chunks.
RankBytes DirectAllReduce(const Shape& s) {
  const uint64_t others = s.n - s.Chunk(s.r);
  const uint64_t mine = (s.p - 1) * s.Chunk(s.r);
  return {others + mine, mine + others};
}
// The recursive all-reduces run among p' = the largest power of two <= p ranks; with
// rem = p - p', each even rank below 2 rem hands its whole input to the odd rank above it and
// gets the whole result back (algo/recursive.h).
struct RankFold {
  int group;
  int extra;
  bool hands_over;
  bool absorbs;
  int index;  // the rank's place among the p'
};
RankFold FoldOf(const Shape& s) {
  int group = 1;
  while (2 * group <= s.p) group *= 2;
  const int extra = s.p - group;
  const bool low = s.r < 2 * extra;
  return {group, extra, low && s.r % 2 == 0, low && s.r % 2 == 1, low ? s.r / 2 : s.r - extra};
}
// Recursive doubling: the whole buffer each way in each of lg p' steps.
RankBytes RecursiveDoubling(const Shape& s) {
  const RankFold f = FoldOf(s);
  if (f.hands_over) return {s.n, s.n};
  int steps = 0;
  for (int m = 1; m < f.group; m *= 2) ++steps;
  const uint64_t b = static_cast<uint64_t>(steps) * s.n + (f.absorbs ? s.n : 0);
  return {b, b};
}
// Rabenseifner over p' chunks of the buffer (n / p', one more for the first n % p'): halving
// sends every chunk but its own and receives, at each mask m, the m chunks it keeps; doubling
// sends those ranges back and receives their siblings, every chunk but its own.
RankBytes Rabenseifner(const Shape& s) {
  const RankFold f = FoldOf(s);
  if (f.hands_over) return {s.n, s.n};
  const auto g = static_cast<uint64_t>(f.group);
  const auto chunk = [&](uint64_t c) { return s.n / g + (c < s.n % g ? 1 : 0); };
  const auto me = static_cast<uint64_t>(f.index);
  uint64_t kept = 0;
  for (uint64_t m = 1; m < g; m *= 2) {
    for (uint64_t c = me / m * m; c < me / m * m + m; ++c) kept += chunk(c);
  }
  const uint64_t b = s.n - chunk(me) + kept + (f.absorbs ? s.n : 0);
  return {b, b};
}

// Every block but its own out and in (direct reduce-scatter and all-gather, Bruck's
// all-gather, the pairwise and direct all-to-all).
RankBytes AllButOwnBlock(const Shape& s) {
  const uint64_t b = (s.p - 1) * s.Block();
  return {b, b};
}
// Bruck's all-to-all: in step 2^k the positions with bit k set, a block each.
RankBytes BruckAllToAll(const Shape& s) {
  uint64_t blocks = 0;
  for (int bit = 1; bit < s.p; bit *= 2)
    blocks += static_cast<uint64_t>(BruckAllToAllBlocks(s.p, bit));
  const uint64_t b = blocks * s.Block();
  return {b, b};
}
// Broadcast.
RankBytes RootToEach(const Shape& s) {
  return s.v == 0 ? RankBytes{(s.p - 1) * s.n, 0} : RankBytes{0, s.n};
}
RankBytes ChainBroadcast(const Shape& s) { return {s.v == s.p - 1 ? 0 : s.n, s.v == 0 ? 0 : s.n}; }
RankBytes BinomialBroadcast(const Shape& s) {
  return {BinomialChildren(s.p, s.v) * s.n, s.v == 0 ? 0 : s.n};
}
// The root scatters the ring's chunks, then the ring all-gather: every chunk but r + 1's out,
// every chunk but its own in.
RankBytes ScatterAllGather(const Shape& s) {
  const uint64_t scatter_sent = s.v == 0 ? s.n - s.Chunk(s.r) : 0;
  const uint64_t scatter_received = s.v == 0 ? 0 : s.Chunk(s.r);
  return {scatter_sent + s.n - s.Chunk(s.r + 1), scatter_received + s.n - s.Chunk(s.r)};
}
// Reduce.
RankBytes EachToRoot(const Shape& s) {
  return s.v == 0 ? RankBytes{0, (s.p - 1) * s.n} : RankBytes{s.n, 0};
}
// Partial sums root+1 -> ... -> root: every rank but the root sends, every rank but root+1
// receives.
RankBytes ChainReduce(const Shape& s) { return {s.v == 0 ? 0 : s.n, s.v == 1 ? 0 : s.n}; }
RankBytes BinomialReduce(const Shape& s) {
  return {s.v == 0 ? 0 : s.n, BinomialChildren(s.p, s.v) * s.n};
}
// The ring reduce-scatter (every chunk but r out, every chunk but r - 1 in), then each rank's
// reduced chunk to the root.
RankBytes ReduceScatterGather(const Shape& s) {
  const uint64_t to_root = s.v == 0 ? 0 : s.Chunk(s.r);
  const uint64_t at_root = s.v == 0 ? s.n - s.Chunk(s.r) : 0;
  return {s.n - s.Chunk(s.r) + to_root, s.n - s.Chunk(s.r - 1) + at_root};
}
RankBytes NoPayload(const Shape&) { return {}; }
// Gather and scatter: a block each between the root and every other rank.
RankBytes BlocksToRoot(const Shape& s) {
  return s.v == 0 ? RankBytes{0, (s.p - 1) * s.Block()} : RankBytes{s.Block(), 0};
}
RankBytes BlocksFromRoot(const Shape& s) {
  return s.v == 0 ? RankBytes{(s.p - 1) * s.Block(), 0} : RankBytes{0, s.Block()};
}

// --- the v-collectives
// Its block to every peer; every other block in.
RankBytes OwnBlockToAll(const Shape& s) { return {(s.p - 1) * s.At(s.r), s.total - s.At(s.r)}; }
// The ring all-gather-v forwards every block but the next rank's (which that rank has).
RankBytes RingGatherV(const Shape& s) { return {s.total - s.At(s.r + 1), s.total - s.At(s.r)}; }
// Block q to rank q; p - 1 copies of its own block in, to reduce.
RankBytes BlockToEachOwner(const Shape& s) { return {s.total - s.At(s.r), (s.p - 1) * s.At(s.r)}; }
// The ring reduce-scatter-v sends every block but its own and receives every block but the
// previous rank's.
RankBytes RingScatterV(const Shape& s) { return {s.total - s.At(s.r), s.total - s.At(s.r - 1)}; }
// All-to-all-v: every block but its own out, every peer's block for it in.
RankBytes Personal(const Shape& s) {
  return {s.total - s.At(s.r), Sum(s.recv) - s.recv[static_cast<size_t>(s.r)]};
}
RankBytes ToRoot(const Shape& s) {
  return s.r == s.root ? RankBytes{0, s.total - s.At(s.r)} : RankBytes{s.At(s.r), 0};
}
RankBytes FromRoot(const Shape& s) {
  return s.r == s.root ? RankBytes{s.total - s.At(s.r), 0} : RankBytes{0, s.At(s.r)};
}

struct Row {
  CollectiveKind kind;
  std::string_view algorithm;
  RankBytes (*bytes)(const Shape&);
};

constexpr std::array<Row, 35> kRows = {{
    {CollectiveKind::kAllReduce, "oneshot", EveryoneWhole},
    {CollectiveKind::kAllReduce, "direct", DirectAllReduce},
    {CollectiveKind::kAllReduce, "ring", RingAllReduce},
    {CollectiveKind::kReduceScatter, "direct", AllButOwnBlock},
    {CollectiveKind::kReduceScatter, "ring", RingReduceScatter},
    {CollectiveKind::kAllGather, "direct", AllButOwnBlock},
    {CollectiveKind::kAllGather, "ring", RingAllGather},
    {CollectiveKind::kAllGather, "bruck", AllButOwnBlock},
    {CollectiveKind::kBroadcast, "direct", RootToEach},
    {CollectiveKind::kBroadcast, "chain", ChainBroadcast},
    {CollectiveKind::kBroadcast, "binomial", BinomialBroadcast},
    {CollectiveKind::kBroadcast, "scatter_allgather", ScatterAllGather},
    {CollectiveKind::kReduce, "direct", EachToRoot},
    {CollectiveKind::kReduce, "chain", ChainReduce},
    {CollectiveKind::kReduce, "binomial", BinomialReduce},
    {CollectiveKind::kReduce, "rs_gather", ReduceScatterGather},
    {CollectiveKind::kBarrier, "flag", NoPayload},
    {CollectiveKind::kBarrier, "direct", NoPayload},
    {CollectiveKind::kBarrier, "dissemination", NoPayload},
    {CollectiveKind::kGather, "direct", BlocksToRoot},
    {CollectiveKind::kScatter, "direct", BlocksFromRoot},
    {CollectiveKind::kAllToAll, "pairwise", AllButOwnBlock},
    {CollectiveKind::kAllToAll, "direct", AllButOwnBlock},
    {CollectiveKind::kAllToAll, "bruck", BruckAllToAll},
    {CollectiveKind::kAllGatherV, "pairwise", OwnBlockToAll},
    {CollectiveKind::kAllGatherV, "direct", OwnBlockToAll},
    {CollectiveKind::kAllGatherV, "ring", RingGatherV},
    {CollectiveKind::kReduceScatterV, "direct", BlockToEachOwner},
    {CollectiveKind::kReduceScatterV, "ring", RingScatterV},
    {CollectiveKind::kAllToAllV, "pairwise", Personal},
    {CollectiveKind::kAllToAllV, "direct", Personal},
    {CollectiveKind::kGatherV, "direct", ToRoot},
    {CollectiveKind::kScatterV, "direct", FromRoot},
    {CollectiveKind::kAllReduce, "rd", RecursiveDoubling},
    {CollectiveKind::kAllReduce, "rabenseifner", Rabenseifner},
}};

}  // namespace

std::optional<RankBytes> RankBytesOf(std::string_view algorithm, const RankCall& call) {
  const int p = call.ranks;
  if (p < 1 || call.rank < 0 || call.rank >= p || call.root < 0 || call.root >= p) {
    return std::nullopt;
  }
  const auto entries = static_cast<size_t>(p);
  const bool varied = !call.send_counts.empty() || !call.recv_counts.empty();
  if (varied && call.send_counts.size() != entries) return std::nullopt;
  if (call.kind == CollectiveKind::kAllToAllV && call.recv_counts.size() != entries) {
    return std::nullopt;
  }
  for (const Row& row : kRows) {
    if (row.kind != call.kind || row.algorithm != algorithm) continue;
    if (p == 1) return RankBytes{};
    const Shape shape{
        p,          call.rank,        call.root,        Shape::Mod(call.rank - call.root, p),
        call.count, call.send_counts, call.recv_counts, Sum(call.send_counts)};
    RankBytes b = row.bytes(shape);
    b.sent *= call.elem;
    b.received *= call.elem;
    return b;
  }
  return std::nullopt;
}

}  // namespace chorus::model
