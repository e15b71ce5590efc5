// The cost of every collective algorithm chorus runs, in machine-independent terms, and its
// predicted time from the calibrated machine parameters (model/tuning.h). Each algorithm's row
// in the algorithm table (algo/select.cpp) names its terms function here, so an algorithm
// without costs cannot be added; the selector compares the predictions among the algorithms
// whose rule allows a call, and `chorus model` prints them beside measured times.
// docs/algorithms.md ("Cost model and tuning") lists the formulas.
//
//   MachineParams shm = ActiveTuning()->For(TransportKind::kShm);
//   double t = PredictSeconds(RingAllReduceTerms, /*ranks=*/4, /*bytes=*/1 << 20, shm,
//                             /*cores=*/2);
//
// `bytes` is the total buffer (all-reduce buffer, reduce-scatter input, all-gather output), as
// in cost_model.h. Every algorithm's time has the form
//   s * (steps * alpha + sent * n * beta + reduced * n * gamma)
// where steps, sent and reduced depend only on the algorithm and p (AlgorithmTerms), and s is
// the oversubscription factor: with more ranks than cores the ranks take turns on the cores, so
// every byte copied or reduced costs ranks / cores times as long, and so does every dependent
// step, which ends only once each rank of it has had its turn (s = 1 when ranks <= cores or
// cores <= 0).
//
// Edge cases: ranks <= 1 or bytes <= 0 (or NaN) predict 0 s (nothing moves).
// Thread safety: pure functions.
#pragma once

#include "model/cost_model.h"

namespace chorus::model {

// An algorithm's cost in units that do not depend on the machine: dependent message steps, and
// the bytes each rank sends and reduces as multiples of the total buffer n.
struct AlgorithmTerms {
  double steps = 0;
  double sent = 0;     // bytes sent per rank / n
  double reduced = 0;  // bytes reduced per rank / n (input bytes combined with another input)
};

// An algorithm's terms for p >= 2 ranks.
using TermsFn = AlgorithmTerms (*)(int p);

// The terms of `terms` for `ranks` ranks: every term 0 for ranks <= 1.
AlgorithmTerms TermsFor(TermsFn terms, int ranks);

// ranks / cores when ranks > cores > 0, else 1.
double OversubscriptionFactor(int ranks, int cores);

// Predicted seconds of one call of the algorithm whose terms are `terms`.
double PredictSeconds(TermsFn terms, int ranks, double bytes, const MachineParams& m, int cores);

// Every algorithm's terms, named after the algorithm's run function (algo/).
AlgorithmTerms OneShotAllReduceTerms(int p);
AlgorithmTerms DirectAllReduceTerms(int p);
AlgorithmTerms HierarchicalAllReduceTerms(int p);  // costed as the flat ring: no host layout
AlgorithmTerms RingAllReduceTerms(int p);
AlgorithmTerms RecursiveDoublingAllReduceTerms(int p);
AlgorithmTerms RabenseifnerAllReduceTerms(int p);
AlgorithmTerms DirectReduceScatterTerms(int p);
AlgorithmTerms RingReduceScatterTerms(int p);
AlgorithmTerms DirectAllGatherTerms(int p);
AlgorithmTerms RingAllGatherTerms(int p);
AlgorithmTerms BruckAllGatherTerms(int p);
AlgorithmTerms DirectBroadcastTerms(int p);
AlgorithmTerms ChainBroadcastTerms(int p);
AlgorithmTerms BinomialBroadcastTerms(int p);
AlgorithmTerms ScatterAllGatherBroadcastTerms(int p);
AlgorithmTerms DirectReduceTerms(int p);
AlgorithmTerms ChainReduceTerms(int p);
AlgorithmTerms BinomialReduceTerms(int p);
AlgorithmTerms ReduceScatterGatherReduceTerms(int p);
AlgorithmTerms FlagBarrierTerms(int p);
AlgorithmTerms DirectBarrierTerms(int p);
AlgorithmTerms DisseminationBarrierTerms(int p);
AlgorithmTerms DirectGatherTerms(int p);
AlgorithmTerms DirectScatterTerms(int p);
AlgorithmTerms PairwiseAllToAllTerms(int p);
AlgorithmTerms DirectAllToAllTerms(int p);
AlgorithmTerms BruckAllToAllTerms(int p);
// The positions in [0, p) with bit `bit` (a power of two) set: the blocks Bruck's all-to-all
// sends in that step.
int BruckAllToAllBlocks(int p, int bit);
// The v-collectives, costed at even counts (n / p per block).
AlgorithmTerms PairwiseAllGatherVTerms(int p);
AlgorithmTerms DirectReduceScatterVTerms(int p);
AlgorithmTerms RingAllGatherVTerms(int p);
AlgorithmTerms DirectAllGatherVTerms(int p);
AlgorithmTerms RingReduceScatterVTerms(int p);
AlgorithmTerms PairwiseAllToAllVTerms(int p);
AlgorithmTerms DirectAllToAllVTerms(int p);
AlgorithmTerms DirectGatherVTerms(int p);
AlgorithmTerms DirectScatterVTerms(int p);

}  // namespace chorus::model
