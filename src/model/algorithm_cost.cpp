// The algorithms' cost terms (see algorithm_cost.h): one function per algorithm, as (steps,
// bytes sent / n, bytes reduced / n) for p >= 2 ranks, in the order of docs/algorithms.md. The
// algorithm table (algo/select.cpp) names each one in its row.
//
// "Sent" counts the bytes that move along a rank's critical path. That is the bytes the rank
// sends, except in the fold of recursive doubling and Rabenseifner for p that is not a power of
// two: there the p - p' extra ranks first hand their whole input to a partner (n bytes, reduced
// by the partner) and get the whole result back at the end (n bytes), so every rank waits for
// two extra steps of n bytes even though no single rank sends both.
#include "model/algorithm_cost.h"

#include <algorithm>

namespace chorus::model {
namespace {

// log2 of the largest power of two <= p, that power (p' in the docs), and ceil(log2 p); p >= 1.
int Log2Floor(int p) {
  int l = 0;
  while ((p >> (l + 1)) != 0) ++l;
  return l;
}
int PowerOfTwoFloor(int p) { return 1 << Log2Floor(p); }
int Log2Ceil(int p) { return PowerOfTwoFloor(p) == p ? Log2Floor(p) : Log2Floor(p) + 1; }

// The fold of the power-of-two algorithms: one step in (n bytes, reduced), one step out.
AlgorithmTerms FoldTerms(int p) {
  if (PowerOfTwoFloor(p) == p) return {};
  return {.steps = 2, .sent = 2, .reduced = 1};
}

AlgorithmTerms Plus(AlgorithmTerms a, AlgorithmTerms b) {
  return {a.steps + b.steps, a.sent + b.sent, a.reduced + b.reduced};
}

}  // namespace

// --- all-reduce
// Every rank sends its whole input to every peer and combines the p inputs itself.
AlgorithmTerms OneShotAllReduceTerms(int p) {
  return {.steps = 1, .sent = p - 1.0, .reduced = p - 1.0};
}

// Direct reduce-scatter (rank r combines chunk r of all p inputs), then direct all-gather.
AlgorithmTerms DirectAllReduceTerms(int p) {
  const double share = (p - 1.0) / p;
  return {.steps = 2, .sent = 2 * share, .reduced = share};
}

// Without the host layout it costs what the flat ring costs (same bytes, same steps).
AlgorithmTerms HierarchicalAllReduceTerms(int p) {
  const double share = (p - 1.0) / p;
  return {.steps = 2.0 * (p - 1), .sent = 2 * share, .reduced = share};
}

AlgorithmTerms RingAllReduceTerms(int p) {
  const double share = (p - 1.0) / p;
  return {.steps = 2.0 * (p - 1), .sent = 2 * share, .reduced = share};
}

// Recursive doubling over p' = 2^L ranks: L exchanges of the whole buffer, each reduced.
AlgorithmTerms RecursiveDoublingAllReduceTerms(int p) {
  const double l = Log2Floor(p);
  return Plus({.steps = l, .sent = l, .reduced = l}, FoldTerms(p));
}

// Recursive-halving reduce-scatter + recursive-doubling all-gather over p' ranks.
AlgorithmTerms RabenseifnerAllReduceTerms(int p) {
  const double q = PowerOfTwoFloor(p);
  const double share = (q - 1) / q;
  return Plus({.steps = 2.0 * Log2Floor(p), .sent = 2 * share, .reduced = share}, FoldTerms(p));
}

// --- reduce-scatter
AlgorithmTerms DirectReduceScatterTerms(int p) {
  const double share = (p - 1.0) / p;
  return {.steps = 1, .sent = share, .reduced = share};
}

AlgorithmTerms RingReduceScatterTerms(int p) {
  const double share = (p - 1.0) / p;
  return {.steps = p - 1.0, .sent = share, .reduced = share};
}

// --- all-gather
AlgorithmTerms DirectAllGatherTerms(int p) {
  return {.steps = 1, .sent = (p - 1.0) / p, .reduced = 0};
}

AlgorithmTerms RingAllGatherTerms(int p) {
  return {.steps = p - 1.0, .sent = (p - 1.0) / p, .reduced = 0};
}

// Block distances 1, 2, 4, ...: ceil(lg p) steps, each rank still receives p-1 blocks.
AlgorithmTerms BruckAllGatherTerms(int p) {
  return {.steps = static_cast<double>(Log2Ceil(p)), .sent = (p - 1.0) / p, .reduced = 0};
}

// --- broadcast
// The root sends the whole buffer to each peer (its critical path: p - 1 copies of n).
AlgorithmTerms DirectBroadcastTerms(int p) { return {.steps = 1, .sent = p - 1.0, .reduced = 0}; }

// p - 1 hops; pipelined, so each rank sends n once.
AlgorithmTerms ChainBroadcastTerms(int p) { return {.steps = p - 1.0, .sent = 1, .reduced = 0}; }

// ceil(log2 p) rounds; the root sends n to each of its ceil(log2 p) children.
AlgorithmTerms BinomialBroadcastTerms(int p) {
  const double rounds = Log2Ceil(p);
  return {.steps = rounds, .sent = rounds, .reduced = 0};
}

// The root's scatter (1 step, (p-1)/p n), then the ring all-gather (p-1 steps, (p-1)/p n).
AlgorithmTerms ScatterAllGatherBroadcastTerms(int p) {
  return {.steps = static_cast<double>(p), .sent = 2 * (p - 1.0) / p, .reduced = 0};
}

// --- reduce
// The root receives and combines p - 1 inputs of n.
AlgorithmTerms DirectReduceTerms(int p) {
  return {.steps = 1, .sent = p - 1.0, .reduced = p - 1.0};
}

AlgorithmTerms ChainReduceTerms(int p) { return {.steps = p - 1.0, .sent = 1, .reduced = 1}; }

// ceil(log2 p) rounds; the root receives and combines n from each of its ceil(log2 p) children.
AlgorithmTerms BinomialReduceTerms(int p) {
  const double rounds = Log2Ceil(p);
  return {.steps = rounds, .sent = rounds, .reduced = rounds};
}

// The ring reduce-scatter (p-1 steps, (p-1)/p n sent and reduced), then the chunks to the root
// (1 step): the root receives (p-1)/p n on the ring and (p-1)/p n of chunks.
AlgorithmTerms ReduceScatterGatherReduceTerms(int p) {
  return {.steps = static_cast<double>(p), .sent = 2 * (p - 1.0) / p, .reduced = (p - 1.0) / p};
}

// --- barrier (no bytes)
AlgorithmTerms FlagBarrierTerms(int) { return {.steps = 1, .sent = 0, .reduced = 0}; }
AlgorithmTerms DirectBarrierTerms(int) { return {.steps = 1, .sent = 0, .reduced = 0}; }

AlgorithmTerms DisseminationBarrierTerms(int p) {
  return {.steps = static_cast<double>(Log2Ceil(p)), .sent = 0, .reduced = 0};
}

// --- gather and scatter
// The root receives (gather) or sends (scatter) the p - 1 blocks of the others.
AlgorithmTerms DirectGatherTerms(int p) {
  return {.steps = 1, .sent = (p - 1.0) / p, .reduced = 0};
}

AlgorithmTerms DirectScatterTerms(int p) {
  return {.steps = 1, .sent = (p - 1.0) / p, .reduced = 0};
}

// --- all-to-all
// One partner per round: p - 1 rounds for even p, p for odd (each rank sits one out); every
// rank sends its p - 1 blocks for the others.
AlgorithmTerms PairwiseAllToAllTerms(int p) {
  return {.steps = p % 2 == 0 ? p - 1.0 : p * 1.0, .sent = (p - 1.0) / p, .reduced = 0};
}

int BruckAllToAllBlocks(int p, int bit) {
  // Each run of 2 bit positions has bit set in its upper half; then the partial run's share.
  return p / (2 * bit) * bit + std::max(0, p % (2 * bit) - bit);
}

// Bruck: ceil(lg p) steps; step 2^k sends the positions in [0, p) with bit k set, n/p each.
AlgorithmTerms BruckAllToAllTerms(int p) {
  int blocks = 0;
  for (int bit = 1; bit < p; bit *= 2) blocks += BruckAllToAllBlocks(p, bit);
  return {.steps = static_cast<double>(Log2Ceil(p)),
          .sent = static_cast<double>(blocks) / p,
          .reduced = 0};
}

// Every block at once: 1 step, (p-1)/p n out (on thread ranks by reference).
AlgorithmTerms DirectAllToAllTerms(int p) {
  return {.steps = 1, .sent = (p - 1.0) / p, .reduced = 0};
}

// --- the v-collectives, at even counts: the uneven blocks change the bytes each rank sends
// (the traffic tests count them exactly), not the steps.
AlgorithmTerms PairwiseAllGatherVTerms(int p) { return PairwiseAllToAllTerms(p); }
AlgorithmTerms DirectReduceScatterVTerms(int p) { return DirectReduceScatterTerms(p); }
// The ring over uneven blocks costs the ring's terms for the even split; with uneven counts a
// rank sends the total less one block (the next rank's, or its own), as the counters show.
AlgorithmTerms RingAllGatherVTerms(int p) { return RingAllGatherTerms(p); }
AlgorithmTerms DirectAllGatherVTerms(int p) { return DirectAllGatherTerms(p); }
AlgorithmTerms RingReduceScatterVTerms(int p) { return RingReduceScatterTerms(p); }
AlgorithmTerms PairwiseAllToAllVTerms(int p) { return PairwiseAllToAllTerms(p); }
AlgorithmTerms DirectAllToAllVTerms(int p) { return DirectAllToAllTerms(p); }
AlgorithmTerms DirectGatherVTerms(int p) { return DirectGatherTerms(p); }
AlgorithmTerms DirectScatterVTerms(int p) { return DirectScatterTerms(p); }

double OversubscriptionFactor(int ranks, int cores) {
  if (cores <= 0 || ranks <= cores) return 1.0;
  return static_cast<double>(ranks) / cores;
}

AlgorithmTerms TermsFor(TermsFn terms, int ranks) {
  if (ranks <= 1) return {};
  return terms(ranks);
}

double PredictSeconds(TermsFn terms, int ranks, double bytes, const MachineParams& m, int cores) {
  if (ranks <= 1 || !(bytes > 0.0)) return 0.0;
  const AlgorithmTerms t = terms(ranks);
  const double s = OversubscriptionFactor(ranks, cores);
  return s * (t.steps * m.alpha_s + t.sent * bytes * m.beta_s_per_byte +
              t.reduced * bytes * m.gamma_s_per_byte);
}

}  // namespace chorus::model
