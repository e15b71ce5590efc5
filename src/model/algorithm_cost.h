// Predicted time of every collective algorithm chorus knows, from the calibrated machine
// parameters (model/tuning.h) and the shape of the call. The selector compares these numbers
// among the algorithms whose hard rule allows them; `chorus model` prints them beside measured
// times. docs/algorithms.md ("Cost model and tuning") lists the formulas.
//
//   MachineParams shm = ActiveTuning()->For(TransportKind::kShm);
//   double t = PredictSeconds(CollectiveKind::kAllReduce, "ring", /*ranks=*/4, /*bytes=*/1 << 20,
//                             shm, /*cores=*/2);
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
// Edge cases: ranks <= 1 or bytes <= 0 (or NaN) predict 0 s for every known algorithm (nothing
// moves); an unknown (kind, algorithm) predicts a negative number.
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "chorus/communicator.h"
#include "model/cost_model.h"

namespace chorus::model {

// An algorithm's cost in units that do not depend on the machine: dependent message steps, and
// the bytes each rank sends and reduces as multiples of the total buffer n.
struct AlgorithmTerms {
  double steps = 0;
  double sent = 0;     // bytes sent per rank / n
  double reduced = 0;  // bytes reduced per rank / n (input bytes combined with another input)
};

// The terms of `algorithm` for `ranks` ranks; nullopt for an unknown (kind, algorithm). For
// ranks <= 1 every term is 0.
std::optional<AlgorithmTerms> Terms(CollectiveKind kind, std::string_view algorithm, int ranks);

// ranks / cores when ranks > cores > 0, else 1.
double OversubscriptionFactor(int ranks, int cores);

// Predicted seconds of one call; negative for an unknown (kind, algorithm).
double PredictSeconds(CollectiveKind kind, std::string_view algorithm, int ranks, double bytes,
                      const MachineParams& m, int cores);

// The algorithms the model knows for `kind`, in table order.
std::vector<std::string_view> ModeledAlgorithms(CollectiveKind kind);

}  // namespace chorus::model
