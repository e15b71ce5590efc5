// The verdict of a census (see census.h).
#include "transport/census.h"

#include <algorithm>
#include <cstdio>

#include "base/collectives.h"

namespace chorus::internal {

bool UnpackTag(const uint64_t words[Beacon::kCallWords], CallTag* tag) {
  const auto kind = static_cast<unsigned>(words[2] & 0xff);
  const auto dtype = static_cast<unsigned>(words[2] >> 8 & 0xff);
  const auto op = static_cast<unsigned>(words[2] >> 16 & 0xff);
  if (!IsCollective(kind) || dtype >= kNumDataTypes || op >= kNumReduceOps) return false;
  tag->call_index = words[0];
  tag->count = words[1];
  tag->kind = static_cast<CollectiveKind>(kind);
  tag->dtype = static_cast<DataType>(dtype);
  tag->op = static_cast<ReduceOp>(op);
  tag->algorithm = static_cast<uint8_t>(words[2] >> 24 & 0xff);
  tag->root = static_cast<uint32_t>(words[2] >> 32);
  tag->layout = words[3];
  return true;
}

bool ReadCall(const Beacon& beacon, CallTag* tag) {
  const uint32_t before = beacon.call_version.load(std::memory_order_acquire);
  if (before == 0 || before % 2 != 0) return false;
  uint64_t words[Beacon::kCallWords];
  for (int i = 0; i < Beacon::kCallWords; ++i) {
    words[i] = beacon.call[i].load(std::memory_order_acquire);
  }
  if (beacon.call_version.load(std::memory_order_relaxed) != before) return false;
  return UnpackTag(words, tag);
}

namespace {

std::string RankList(const std::vector<int>& ranks) {
  std::string list = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return list;
}

const char* Is(const std::vector<int>& ranks) { return ranks.size() == 1 ? " is" : " are"; }

std::string Seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", s);
  return text;
}

}  // namespace

namespace {

enum class Standing { kFine, kWaiting, kSilent, kDead, kAbsent, kIdle, kUnknown };

Standing StandingOf(const PeerState& s, uint64_t call, double idle_limit) {
  if (!s.known) return Standing::kUnknown;
  if (!s.answered) return Standing::kSilent;
  if (!s.alive) return Standing::kDead;
  if (s.failed) return Standing::kFine;  // it gave up already: a survivor, not the cause
  const bool in_call = s.active == static_cast<int64_t>(call);
  // Still in an earlier call, waiting: it is held up by someone else, whom the chain follows.
  const bool held_up = s.active >= 0 && s.active < static_cast<int64_t>(call) && s.waiting_for >= 0;
  if (s.started <= call && !held_up) return Standing::kAbsent;
  if ((in_call || held_up) && s.idle_seconds > idle_limit) return Standing::kIdle;
  if ((in_call || held_up) && s.waiting_for >= 0) return Standing::kWaiting;
  return Standing::kFine;
}

std::string Why(Standing standing, const std::vector<int>& ranks,
                const std::vector<PeerState>& states, uint64_t call) {
  const std::string who = RankList(ranks) + Is(ranks) + " behind: ";
  switch (standing) {
    case Standing::kSilent:
      return who + "no answer from " + (ranks.size() == 1 ? "it" : "them") +
             " (stopped, hung, or cut off)";
    case Standing::kDead:
      return who + "exited";
    case Standing::kAbsent: {
      std::string text = who + "not in call #" + std::to_string(call);
      if (ranks.size() == 1) {
        const uint64_t started = states[static_cast<size_t>(ranks[0])].started;
        text += " (it has started " + std::to_string(started) + (started == 1 ? " call" : " calls");
        text += started == call ? ", so it is busy outside chorus or stopped)" : ")";
      }
      return text;
    }
    case Standing::kIdle: {
      double longest = 0;
      for (int r : ranks) longest = std::max(longest, states[static_cast<size_t>(r)].idle_seconds);
      return who + "in call #" + std::to_string(call) + " but no sign of life for " +
             Seconds(longest) + " (stopped, or starved of CPU)";
    }
    default:
      return "";
  }
}

// A rank that waits refreshes its beacon every sleep slice; one that has been quiet for a good
// part of the time this rank waited has stopped, or gets no CPU.
double IdleLimit(double waited) { return std::max(0.25, waited / 4); }

}  // namespace

bool Ambiguous(const std::vector<PeerState>& states, int me, uint64_t call, double waited) {
  int quiet = 0;   // silent, or without a sign of life
  int absent = 0;  // not in the call
  for (int r = 0; r < static_cast<int>(states.size()); ++r) {
    if (r == me) continue;
    const Standing standing = StandingOf(states[static_cast<size_t>(r)], call, IdleLimit(waited));
    quiet += standing == Standing::kSilent || standing == Standing::kIdle ? 1 : 0;
    absent += standing == Standing::kAbsent ? 1 : 0;
  }
  return quiet >= 1 && quiet + absent >= 2;
}

std::string Blame(const std::vector<PeerState>& states, int me, uint64_t call, double waited) {
  const int p = static_cast<int>(states.size());
  const double idle_limit = IdleLimit(waited);
  // First the chain of waits that starts here: it leads to the cause when it can be followed.
  std::vector<bool> seen(static_cast<size_t>(p), false);
  std::vector<int> chain{me};
  seen[static_cast<size_t>(me)] = true;
  int unreachable = -1;  // the rank the chain ran into but could not ask
  for (;;) {
    const int next = states[static_cast<size_t>(chain.back())].waiting_for;
    if (next < 0 || next >= p) {
      if (chain.size() == 1) break;
      return "rank " + std::to_string(chain.back()) + " is behind: in call #" +
             std::to_string(call) + " and waiting on nobody (busy, or slow)";
    }
    if (seen[static_cast<size_t>(next)]) {
      std::vector<int> cycle(std::find(chain.begin(), chain.end(), next), chain.end());
      std::sort(cycle.begin(), cycle.end());
      return RankList(cycle) + " wait on each other in a cycle in call #" + std::to_string(call);
    }
    const Standing standing = StandingOf(states[static_cast<size_t>(next)], call, idle_limit);
    if (standing == Standing::kWaiting) {
      seen[static_cast<size_t>(next)] = true;
      chain.push_back(next);
      continue;
    }
    if (standing == Standing::kUnknown) {
      unreachable = next;
      break;
    }
    if (standing == Standing::kFine) break;
    return Why(standing, {next}, states, call);
  }
  // Else whoever stands out in the whole group, the most telling kind first.
  for (Standing standing :
       {Standing::kSilent, Standing::kDead, Standing::kAbsent, Standing::kIdle}) {
    std::vector<int> ranks;
    for (int r = 0; r < p; ++r) {
      if (r != me && StandingOf(states[static_cast<size_t>(r)], call, idle_limit) == standing) {
        ranks.push_back(r);
      }
    }
    if (!ranks.empty()) return Why(standing, ranks, states, call);
  }
  if (unreachable >= 0) {
    const int waiter = chain.back();
    return "rank " + std::to_string(unreachable) +
           " is behind: " + (waiter == me ? "this rank" : "rank " + std::to_string(waiter)) +
           " waits on it, and it cannot be asked from here";
  }
  return "";
}

}  // namespace chorus::internal
