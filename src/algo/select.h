// Algorithm selection: a table of {name, description, rule} per collective, and the choice for
// one call. A caller may name an algorithm (CallOptions::algorithm, CommOptions::algorithm,
// CHORUS_ALGO); otherwise the rule of the first matching entry picks it.
#pragma once

#include <span>
#include <string_view>

#include "algo/primitives.h"
#include "chorus/options.h"

namespace chorus::internal {

using AlgorithmFn = Status (*)(const CallContext& ctx, const void* send, void* recv, size_t count);

struct CallShapeForSelection {
  CollectiveKind kind;
  TransportKind transport;
  int ranks;
  size_t bytes;             // total buffer
  bool multi_host = false;  // the transport has a host layout (Transport::hosts())
};

struct AlgorithmInfo {
  CollectiveKind kind;
  std::string_view name;
  std::string_view description;
  std::string_view rule;  // when the default selection picks it, in words
  bool (*picks)(const CallShapeForSelection& shape);
  AlgorithmFn run;
};

// Every algorithm, in the order the default selection tries them.
std::span<const AlgorithmInfo> Algorithms();

// The algorithm for a call: `requested` by name (empty = by the rules). An unknown name, or
// one that does not implement `shape.kind`, is an invalid argument naming the choices.
Result<const AlgorithmInfo*> SelectAlgorithm(const CallShapeForSelection& shape,
                                             std::string_view requested);

}  // namespace chorus::internal
