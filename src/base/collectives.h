// The collectives chorus runs, one row each: what every layer needs to know about a kind of
// call, so that adding a collective means adding a row (and its algorithms in algo/select.cpp)
// rather than editing a switch in each layer.
//
//   const CollectiveInfo& c = Collective(CollectiveKind::kBroadcast);
//   c.name == "broadcast"; c.rooted; c.counts == Counts::kSame
//
// Read by: the argument checks (core/validate), the call's tag and its description in errors
// (transport/transport.h), the TCP frame and MPI header checks, the cost model's byte counts and
// bus-bandwidth factors (model/), `chorus bench --op` and the test matrix.
// Thread safety: constant data.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

#include "chorus/communicator.h"

namespace chorus::internal {

// How a call's send and recv counts relate, in blocks of n elements (p = the communicator's
// size). Where one buffer holds p blocks and the other one, in place means the small one is
// block `rank` of the large one; where both hold the same, that they are the same buffer.
enum class Counts : uint8_t {
  kSame,      // send: 1 block, recv: 1 block            all-reduce, broadcast, reduce
  kRecvIsP,   // send: 1 block, recv: p blocks           all-gather, gather
  kSendIsP,   // send: p blocks, recv: 1 block           reduce-scatter, scatter
  kBothAreP,  // send: p blocks, recv: p blocks          all-to-all
  kNone,      // no buffers                              barrier
};

// What a rank's recv holds afterwards.
enum class Outcome : uint8_t {
  kCombined,        // the reduction of every rank's input (all-reduce)
  kCombinedBlock,   // block r of the reduction (reduce-scatter)
  kCombinedAtRoot,  // the root: the reduction; the others: recv is not written (reduce)
  kMoved,           // blocks of the ranks' sends, as CollectiveInfo::source says
  kNothing,         // barrier
};

// Where a block of a recv comes from: block `block` of rank `rank`'s send.
struct BlockSource {
  int rank;
  int block;
};

struct CollectiveInfo {
  CollectiveKind kind;
  std::string_view name;      // in errors, `chorus bench --op` and test names
  std::string_view csv_name;  // in `chorus bench --csv` and the peers' CSV (../shared/peers)
  // Also accepted by FindCollective (torch's and MPI's spellings); unused entries are empty.
  std::array<std::string_view, 3> aliases;
  bool reduces;  // takes a ReduceOp
  bool rooted;   // takes a root rank
  // Buffers only the root uses (MPI's "significant only at root"): on the other ranks the
  // call ignores send (broadcast) or never writes recv (reduce), and neither is checked.
  bool send_only_at_root;
  bool recv_only_at_root;
  Counts counts;
  // The v-variants: the blocks of a buffer of p blocks have per-rank lengths, from
  // CallArgs::send_counts or recv_counts, instead of n each; the buffer of one block holds the
  // rank's own (or, rooted, whatever it sends or gets).
  bool varied;
  Outcome outcome;
  // kMoved: the source of block j of rank r's recv (blocks of n elements, n the call's block;
  // a recv of one block has only j = 0). Null for the others.
  BlockSource (*source)(int rank, int block, int root);
  // In place, in words, for the error that rejects an overlap that is not; empty where the
  // collective has no in-place form.
  std::string_view in_place;
  // Bytes a rank of a ring-like schedule sends, as a multiple of the total buffer n, and the
  // nccl-tests bus bandwidth factor (busbw = algbw * factor); both of p >= 2.
  double (*model_bytes)(int p);
  double (*bus_factor)(int p);
};

// One call as the caller made it: what every layer below the API works from.
// The root a collective that is not rooted carries in its tag when chorus runs it for itself
// (Communicator::Split's all-gathers): no call of the API can carry it, so a rank in a user's
// call of the same shape fails the tag check on both sides, as any mismatch.
inline constexpr int kInternalRoot = -2;

struct CallArgs {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  ConstBuffer send;
  MutableBuffer recv;
  ReduceOp op = ReduceOp::kSum;  // used when the collective reduces
  int root = 0;  // used when it is rooted; else 0, or kInternalRoot (above)
  // Used when it is varied: the block lengths of a send or recv of p blocks (p entries).
  std::span<const size_t> send_counts;
  std::span<const size_t> recv_counts;
  // All-to-all-v with displacements: where block q of send (recv) starts, in elements (p
  // entries); empty where the blocks lie back to back in rank order.
  std::span<const size_t> send_displs;
  std::span<const size_t> recv_displs;
};

// Every collective, in CollectiveKind order.
std::span<const CollectiveInfo> Collectives();
const CollectiveInfo& Collective(CollectiveKind kind);
// True when `kind` names a row (a byte from the wire, say).
bool IsCollective(unsigned kind);
// The collective called `name` or one of its aliases, ignoring case, '_' and '-'.
std::optional<CollectiveKind> FindCollective(std::string_view name);

// A call's element counts under its count relation. `block` is n, the unit of the relation;
// `total` is the larger buffer, the count the tag carries and the models' n.
struct CallCounts {
  size_t block = 0;
  size_t send = 0;
  size_t recv = 0;
  size_t total = 0;
};
// The counts of a call of `c` on p ranks with blocks of `block` elements.
CallCounts CountsFor(const CollectiveInfo& c, size_t block, int p);
// The counts a call must have, given the ones a rank passed: the block comes from the buffer
// every rank uses (send, but recv where send is the root's only), so that every rank of a call
// derives the same total even where its other buffer is ignored. An all-to-all's send.count
// that p does not divide gives the counts of the largest block that fits (which then differ).
CallCounts CountsOf(const CollectiveInfo& c, size_t send_count, size_t recv_count, int p);
// A varied collective whose counts every rank passes alike (all-gather-v, reduce-scatter-v):
// they go into the call's tag as a digest. The others' counts differ by rank (all-to-all-v) or
// are the root's only (gather-v, scatter-v), and each pair of ranks checks what it exchanges.
bool CountsShared(const CollectiveInfo& c);
// Where block j of a buffer of blocks with these lengths starts, and their sum.
size_t BlockOffset(std::span<const size_t> counts, int j);
size_t Sum(std::span<const size_t> counts);
// The digest of a call's shared counts (CallTag::layout).
uint64_t CountsDigest(std::span<const size_t> counts);
// The counts of one rank's varied call: the sums of its arrays, or its own block. `total` is
// the one every rank agrees on: the sum of shared counts, else 0.
CallCounts VariedCountsOf(const CollectiveInfo& c, const CallArgs& call, int rank);
// Whether a call's send or recv holds a block per rank (even when p is 1).
constexpr bool SendIsPerRank(Counts counts) {
  return counts == Counts::kSendIsP || counts == Counts::kBothAreP;
}
constexpr bool RecvIsPerRank(Counts counts) {
  return counts == Counts::kRecvIsP || counts == Counts::kBothAreP;
}
// Blocks in a call's send and recv (0, 1 or p).
constexpr size_t SendBlocks(Counts counts, int p) {
  return counts == Counts::kNone ? 0 : SendIsPerRank(counts) ? static_cast<size_t>(p) : 1;
}
constexpr size_t RecvBlocks(Counts counts, int p) {
  return counts == Counts::kNone ? 0 : RecvIsPerRank(counts) ? static_cast<size_t>(p) : 1;
}

}  // namespace chorus::internal
