// Who is behind: the view a rank takes of its group when a wait times out, and the verdict
// drawn from it.
//
// A deadline error that names only the peer a rank waited on often blames a survivor: in a
// ring every rank waits on its neighbour, so the first to time out names a rank that waits
// too. So on a deadline the rank takes a census (Transport::Census): for every rank, how many
// calls it has started, whether it is in this call, whom it waits on, and how long since its
// last sign of life (its waits refresh a Beacon at least every sleep slice). Thread and shm
// ranks read each other's control blocks; TCP ranks ask their peers' progress threads, and a
// rank whose process is stopped does not answer; MPI ranks send a probe notice, which a peer
// answers whenever it polls (waiting in a call, or taking a census), so one that is stopped or
// busy outside chorus does not.
//
// Blame() follows the chain of waits that starts at this rank (whom it waits on, whom that rank
// waits on, ...) to the first rank that did not answer, has exited, has not entered the call,
// shows no sign of life, or waits on nobody, or to the cycle it runs into. Where the chain
// cannot be followed (a rank that cannot be asked), it names whoever stands out in the group,
// in that order.
//
// Thread safety: plain values and pure functions (and a test hook).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/call_tag.h"

namespace chorus::internal {

struct PeerState {
  bool known = true;         // false: the transport cannot tell (then nothing else is set)
  bool answered = true;      // false: asked, but no answer came (a stopped or hung process)
  bool alive = true;         // false: known to have exited
  bool failed = false;       // it has given up on the group already (a survivor, not a cause)
  uint64_t started = 0;      // calls it has started
  int64_t active = -1;       // the call it is running, or -1 between calls
  int waiting_for = -1;      // the peer it is blocked on, or -1
  double idle_seconds = -1;  // since its last sign of life; -1 when it never waited
  bool has_call = false;     // `call` is the call it is in, or was in last
  CallTag call;
};

// "rank 2 is behind: it has not entered call #41 (it has started 41 calls)", or "" when the
// census points at nobody. `me` took the census of `states` (indexed by rank) about `call`
// after waiting `waited` seconds; states[me].waiting_for is the peer its wait was on.
std::string Blame(const std::vector<PeerState>& states, int me, uint64_t call, double waited);

// Whether the census may blame a live rank for a stopped one: some rank other than `me` looks
// stopped (asked but silent, or in the call with no sign of life for longer than Blame allows)
// and another stands out too (looks stopped as well, or has not entered the call). A stopped
// rank looks so for good; a live one starved of CPU only until it runs again. So while the
// census is ambiguous, the rank asks again (Channel::WaitFailed) before Blame names anyone: a
// stopped rank cannot then make a slow survivor look stopped too.
bool Ambiguous(const std::vector<PeerState>& states, int me, uint64_t call, double waited);

// Test hook, null outside tests: called after the first census of a wait that timed out, before
// the rank asks again (blame_test wakes a rank it stopped there).
inline std::atomic<void (*)()> g_after_census_for_testing{nullptr};

}  // namespace chorus::internal
