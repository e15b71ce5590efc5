// The algorithm cost table (see algorithm_cost.h). Every formula lives in kTable below, one row
// per algorithm, as (steps, bytes sent / n, bytes reduced / n) for p ranks, so that the
// table reads like the one in docs/algorithms.md.
//
// "Sent" counts the bytes that move along a rank's critical path. That is the bytes the rank
// sends, except in the fold of recursive doubling and Rabenseifner for p that is not a power of
// two: there the p - p' extra ranks first hand their whole input to a partner (n bytes, reduced
// by the partner) and get the whole result back at the end (n bytes), so every rank waits for
// two extra steps of n bytes even though no single rank sends both.
#include "model/algorithm_cost.h"

#include <array>

namespace chorus::model {
namespace {

using Kind = CollectiveKind;

// log2 of the largest power of two <= p, that power (p' in the docs), and ceil(log2 p); p >= 1.
int Log2Floor(int p) {
  int l = 0;
  while ((p >> (l + 1)) != 0) ++l;
  return l;
}
int PowerOfTwoFloor(int p) { return 1 << Log2Floor(p); }
int Log2Ceil(int p) { return PowerOfTwoFloor(p) == p ? Log2Floor(p) : Log2Floor(p) + 1; }

// The fold of the power-of-two algorithms: one step in (n bytes, reduced), one step out.
AlgorithmTerms Fold(int p) {
  if (PowerOfTwoFloor(p) == p) return {};
  return {.steps = 2, .sent = 2, .reduced = 1};
}

AlgorithmTerms Plus(AlgorithmTerms a, AlgorithmTerms b) {
  return {a.steps + b.steps, a.sent + b.sent, a.reduced + b.reduced};
}

struct Entry {
  Kind kind;
  std::string_view name;
  AlgorithmTerms (*terms)(int p);  // p >= 2
};

// clang-format off
constexpr std::array<Entry, 11> kTable = {{
  // ---------------------------------------------------------------- all-reduce
  // Every rank sends its whole input to every peer and combines the p inputs itself.
  {Kind::kAllReduce, "oneshot", [](int p) -> AlgorithmTerms {
     return {.steps = 1, .sent = p - 1.0, .reduced = p - 1.0}; }},
  // Direct reduce-scatter (rank r combines chunk r of all p inputs), then direct all-gather.
  {Kind::kAllReduce, "direct", [](int p) -> AlgorithmTerms {
     const double share = (p - 1.0) / p;
     return {.steps = 2, .sent = 2 * share, .reduced = share}; }},
  // Without the host layout it costs what the flat ring costs (same bytes, same steps).
  {Kind::kAllReduce, "hierarchical", [](int p) -> AlgorithmTerms {
     const double share = (p - 1.0) / p;
     return {.steps = 2.0 * (p - 1), .sent = 2 * share, .reduced = share}; }},
  {Kind::kAllReduce, "ring", [](int p) -> AlgorithmTerms {
     const double share = (p - 1.0) / p;
     return {.steps = 2.0 * (p - 1), .sent = 2 * share, .reduced = share}; }},
  // Recursive doubling over p' = 2^L ranks: L exchanges of the whole buffer, each reduced.
  {Kind::kAllReduce, "rd", [](int p) -> AlgorithmTerms {
     const double l = Log2Floor(p);
     return Plus({.steps = l, .sent = l, .reduced = l}, Fold(p)); }},
  // Recursive-halving reduce-scatter + recursive-doubling all-gather over p' ranks.
  {Kind::kAllReduce, "rabenseifner", [](int p) -> AlgorithmTerms {
     const double q = PowerOfTwoFloor(p);
     const double share = (q - 1) / q;
     return Plus({.steps = 2.0 * Log2Floor(p), .sent = 2 * share, .reduced = share}, Fold(p)); }},
  // ---------------------------------------------------------------- reduce-scatter
  {Kind::kReduceScatter, "direct", [](int p) -> AlgorithmTerms {
     const double share = (p - 1.0) / p;
     return {.steps = 1, .sent = share, .reduced = share}; }},
  {Kind::kReduceScatter, "ring", [](int p) -> AlgorithmTerms {
     const double share = (p - 1.0) / p;
     return {.steps = p - 1.0, .sent = share, .reduced = share}; }},
  // ---------------------------------------------------------------- all-gather
  {Kind::kAllGather, "direct", [](int p) -> AlgorithmTerms {
     return {.steps = 1, .sent = (p - 1.0) / p, .reduced = 0}; }},
  {Kind::kAllGather, "ring", [](int p) -> AlgorithmTerms {
     return {.steps = p - 1.0, .sent = (p - 1.0) / p, .reduced = 0}; }},
  // Block distances 1, 2, 4, ...: ceil(lg p) steps, each rank still receives p-1 blocks.
  {Kind::kAllGather, "bruck", [](int p) -> AlgorithmTerms {
     return {.steps = static_cast<double>(Log2Ceil(p)), .sent = (p - 1.0) / p, .reduced = 0}; }},
}};
// clang-format on

const Entry* Find(Kind kind, std::string_view algorithm) {
  for (const Entry& entry : kTable) {
    if (entry.kind == kind && entry.name == algorithm) return &entry;
  }
  return nullptr;
}

}  // namespace

std::optional<AlgorithmTerms> Terms(CollectiveKind kind, std::string_view algorithm, int ranks) {
  const Entry* entry = Find(kind, algorithm);
  if (entry == nullptr) return std::nullopt;
  if (ranks <= 1) return AlgorithmTerms{};
  return entry->terms(ranks);
}

double OversubscriptionFactor(int ranks, int cores) {
  if (cores <= 0 || ranks <= cores) return 1.0;
  return static_cast<double>(ranks) / cores;
}

double PredictSeconds(CollectiveKind kind, std::string_view algorithm, int ranks, double bytes,
                      const MachineParams& m, int cores) {
  const std::optional<AlgorithmTerms> terms = Terms(kind, algorithm, ranks);
  if (!terms) return -1.0;
  if (ranks <= 1 || !(bytes > 0.0)) return 0.0;
  const double s = OversubscriptionFactor(ranks, cores);
  return s * (terms->steps * m.alpha_s + terms->sent * bytes * m.beta_s_per_byte +
              terms->reduced * bytes * m.gamma_s_per_byte);
}

std::vector<std::string_view> ModeledAlgorithms(CollectiveKind kind) {
  std::vector<std::string_view> names;
  for (const Entry& entry : kTable) {
    if (entry.kind == kind) names.push_back(entry.name);
  }
  return names;
}

}  // namespace chorus::model
