// All-to-all.
//
// Pairwise exchange: the ranks pair up in rounds (a round-robin tournament: p - 1 rounds for
// even p; p for odd p, each rank sitting one out), and in each round the two partners swap the
// blocks they hold for each other, segment by segment: send one, then receive one. Every rank
// talks to one peer per round, so no two ranks ever send to the same peer at once, and a rank
// sends (p-1)/p of its buffer. In place works too: a block is sent through a staging copy
// before the partner's block overwrites it.
//
// Direct (thread ranks): every rank posts block q of its send to rank q at once, by reference,
// and copies each peer's block for it straight out of that peer's buffer: 1 step, one copy per
// block. In place a block would be overwritten while its reader may still need it, so an
// in-place call runs the pairwise exchange instead.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::internal {

// The partner of rank r in round `round` of the pairwise schedule on p ranks; r itself for a
// bye. Rounds are numbered from 0 to PairwiseRounds(p) - 1.
int PairwisePartner(int r, int round, int p);
int PairwiseRounds(int p);

Status PairwiseAllToAll(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectAllToAll(const CallContext& ctx, const void* send, void* recv, size_t count);

}  // namespace chorus::internal
