// Per-rank bytes of the v-collective algorithms (see rank_bytes.h), one row per algorithm.
#include "model/rank_bytes.h"

#include <array>

namespace chorus::model {
namespace {

uint64_t Sum(std::span<const size_t> v) {
  uint64_t s = 0;
  for (size_t n : v) s += n;
  return s;
}

// One rank's call in elements: p ranks, rank r, the counts and their sum.
struct Shape {
  int p;
  int r;
  int root;
  std::span<const size_t> counts;  // the shared counts, or this rank's send_counts
  std::span<const size_t> recv;    // all-to-all-v: this rank's recv_counts
  uint64_t total;
  // Block q (mod p) of the counts.
  uint64_t At(int q) const { return counts[static_cast<size_t>(((q % p) + p) % p)]; }
};

// Its block to every peer; every other block in.
RankBytes OwnBlockToAll(const Shape& s) { return {(s.p - 1) * s.At(s.r), s.total - s.At(s.r)}; }
// The ring all-gather-v forwards every block but the next rank's (which that rank has).
RankBytes RingGather(const Shape& s) { return {s.total - s.At(s.r + 1), s.total - s.At(s.r)}; }
// Block q to rank q; p - 1 copies of its own block in, to reduce.
RankBytes BlockToEachOwner(const Shape& s) {
  return {s.total - s.At(s.r), (s.p - 1) * s.At(s.r)};
}
// The ring reduce-scatter-v sends every block but its own and receives every block but the
// previous rank's.
RankBytes RingScatter(const Shape& s) { return {s.total - s.At(s.r), s.total - s.At(s.r - 1)}; }
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

constexpr std::array<Row, 9> kRows = {{
    {CollectiveKind::kAllGatherV, "pairwise", OwnBlockToAll},
    {CollectiveKind::kAllGatherV, "direct", OwnBlockToAll},
    {CollectiveKind::kAllGatherV, "ring", RingGather},
    {CollectiveKind::kReduceScatterV, "direct", BlockToEachOwner},
    {CollectiveKind::kReduceScatterV, "ring", RingScatter},
    {CollectiveKind::kAllToAllV, "pairwise", Personal},
    {CollectiveKind::kAllToAllV, "direct", Personal},
    {CollectiveKind::kGatherV, "direct", ToRoot},
    {CollectiveKind::kScatterV, "direct", FromRoot},
}};

}  // namespace

std::optional<RankBytes> VariedRankBytes(std::string_view algorithm, const VariedRankCall& call) {
  const int p = static_cast<int>(call.send_counts.size());
  if (p == 0 || call.rank < 0 || call.rank >= p) return std::nullopt;
  if (call.kind == CollectiveKind::kAllToAllV && call.recv_counts.size() != call.send_counts.size()) {
    return std::nullopt;
  }
  for (const Row& row : kRows) {
    if (row.kind != call.kind || row.algorithm != algorithm) continue;
    if (p == 1) return RankBytes{};
    const Shape shape{p, call.rank, call.root, call.send_counts, call.recv_counts,
                      Sum(call.send_counts)};
    RankBytes b = row.bytes(shape);
    b.sent *= call.elem;
    b.received *= call.elem;
    return b;
  }
  return std::nullopt;
}

}  // namespace chorus::model
