// Algorithm selection: a table of {name, description, rule} per collective, and the choice for
// one call. A caller may name an algorithm (CallOptions::algorithm, CommOptions::algorithm,
// CHORUS_ALGO). Otherwise, of the algorithms whose rule allows the call, the one the cost model
// (model/algorithm_cost.h) predicts fastest with the transport's calibrated parameters
// (model/tuning.h: `chorus tune` or the built-in defaults) runs; on a tie, the earlier entry.
//
// Every rank of a communicator must choose the same algorithm, so the inputs are the call's
// shape and parameters the ranks share; a rank that disagrees (say, another tuning file on
// another host) makes the call fail with "ranks disagree on the call", never hang.
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "algo/primitives.h"
#include "chorus/options.h"
#include "model/algorithm_cost.h"
#include "model/cost_model.h"

namespace chorus::internal {

using AlgorithmFn = Status (*)(const CallContext& ctx, const void* send, void* recv, size_t count);

struct CallShapeForSelection {
  CollectiveKind kind;
  TransportKind transport;
  int ranks;
  size_t bytes;             // total buffer
  bool multi_host = false;  // the transport has a host layout (Transport::hosts())
  int cores = 0;            // cores of a host (0: unknown); more ranks than cores take turns
  const model::MachineParams* params = nullptr;  // the transport's; null: built-in defaults
};

// An algorithm's cost terms (model/algorithm_cost.h), as its row names them. It is made from a
// function, not a pointer, so there is no null one, and it has no default: a row without its
// costs does not compile.
class CostTerms {
 public:
  // NOLINTNEXTLINE(google-explicit-constructor): a row names the function itself
  constexpr CostTerms(model::AlgorithmTerms (&terms)(int p)) : terms_(&terms) {}
  // Every term 0 for ranks <= 1.
  model::AlgorithmTerms operator()(int ranks) const { return model::TermsFor(terms_, ranks); }
  model::TermsFn get() const { return terms_; }

 private:
  model::TermsFn terms_;
};

struct AlgorithmInfo {
  CollectiveKind kind;
  std::string_view name;
  std::string_view description;
  std::string_view rule;  // when the selection may pick it, in words
  bool (*allowed)(const CallShapeForSelection& shape);
  AlgorithmFn run;
  CostTerms terms;
};

// Every algorithm; ties in predicted time go to the earlier entry.
std::span<const AlgorithmInfo> Algorithms();
// True when `kind` has an algorithm called `name`.
bool Implements(CollectiveKind kind, std::string_view name);
// The algorithm of `kind` called `name`, or null.
const AlgorithmInfo* FindAlgorithm(CollectiveKind kind, std::string_view name);

// The model's prediction for `info` on `shape`, in seconds.
double PredictedSeconds(const AlgorithmInfo& info, const CallShapeForSelection& shape);

// The algorithm for a call: `requested` by name (empty = the allowed one predicted fastest).
// An unknown name, or one that does not implement `shape.kind`, is an invalid argument naming
// the choices.
Result<const AlgorithmInfo*> SelectAlgorithm(const CallShapeForSelection& shape,
                                             std::string_view requested);

// SelectAlgorithm for one communicator, which remembers its last few picks: training loops and
// benchmarks repeat a handful of sizes (the bench alternates a 4-byte start sync with the timed
// size), and then a call costs a few comparisons instead of ~900 instructions of cost model.
class Selector {
 public:
  // `shape` holds everything but the kind and the bytes of a call.
  Selector(const CallShapeForSelection& shape, const model::MachineParams& params)
      : shape_(shape), params_(params) {
    shape_.params = &params_;
  }
  Selector(const Selector&) = delete;
  Selector& operator=(const Selector&) = delete;

  Result<const AlgorithmInfo*> Pick(CollectiveKind kind, size_t bytes, std::string_view requested);

 private:
  struct Recent {
    CollectiveKind kind = CollectiveKind::kAllReduce;
    size_t bytes = 0;
    const AlgorithmInfo* info = nullptr;
  };
  CallShapeForSelection shape_;
  model::MachineParams params_;
  std::array<Recent, 4> recent_{};
  size_t next_ = 0;  // the entry to replace
};

}  // namespace chorus::internal
