// Communicator::Split: the ranks that pass one color become a new communicator; and
// Communicator::Shrink: the ranks not excluded do.
//
// Split:
//   1. An all-gather on this communicator gives every rank every rank's color and key, so each
//      knows its new group, its rank in it (by key, then by old rank) and its size. Its call
//      index, the same on every rank, numbers the split.
//   2. Each group meets as Communicator::Create does, through the store this communicator met
//      through, under a name of its own: this communicator's, the split's number and the color.
//   3. A second all-gather tells every rank that every group was made; it also keeps rank 0's
//      store server (when it hosts one) in this call until the last group has met.
// Both all-gathers carry a tag no call of the API can (base/collectives.h, kInternalRoot), so a
// rank in a user's all-gather of the same shape fails the call on both sides, as any mismatch;
// and a mark and their step. A failure after the first is the communicator's, on every rank.
// MPI ranks split their MPI communicator instead (CreateMpiCommunicator's hook).
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/collectives.h"
#include "base/hash.h"
#include "core/comm_state.h"

namespace chorus {

using internal::Clock;
using internal::Deadline;
using internal::Remaining;

namespace {

constexpr int64_t kSplitMark = 0x63686f7275735370;  // "chorusSp"
constexpr int kWords = 4;                           // per rank: mark, step, two values

// `a` + `b`, or the largest duration where that overflows (a timeout of "never").
std::chrono::milliseconds SaturatingAdd(std::chrono::milliseconds a, std::chrono::milliseconds b) {
  return a > std::chrono::milliseconds::max() - b ? std::chrono::milliseconds::max() : a + b;
}

// One of the split's all-gathers: this rank's step and values in, every rank's out. A rank in
// another call fails the group.
Status SplitGather(internal::CommState& state, int64_t step, int64_t a, int64_t b,
                   std::chrono::milliseconds timeout, std::vector<int64_t>* all) {
  const int64_t mine[kWords] = {kSplitMark, step, a, b};
  all->assign(static_cast<size_t>(kWords) * static_cast<size_t>(state.size()), 0);
  const internal::CallArgs call{CollectiveKind::kAllGather,
                                MakeBuffer(std::span<const int64_t>(mine)),
                                MakeBuffer(std::span<int64_t>(*all)),
                                ReduceOp::kSum,
                                internal::kInternalRoot,
                                {},
                                {}};
  if (Status s = state.Run(call, {.timeout = timeout}); !s.ok()) {
    return Status(s.code(), "split: " + s.message());
  }
  for (int r = 0; r < state.size(); ++r) {
    const int64_t* theirs = all->data() + static_cast<size_t>(kWords) * static_cast<size_t>(r);
    if (theirs[0] != kSplitMark || theirs[1] != step) {
      Status s = FailedPrecondition(
          "split: the ranks disagree on the call: rank " + std::to_string(state.rank()) +
          " is in step " + std::to_string(step + 1) + " of a split, rank " + std::to_string(r) +
          " in another all-gather of " + std::to_string(kWords) + " int64 per rank");
      state.Fail(s);
      return s;
    }
  }
  return Status::Ok();
}

// The new communicator of Split or Shrink: `parent`'s options, as rank `rank` of `size`, named
// `parent`'s name and `suffix`, meeting through `parent`'s store (and keeping the store server
// `parent` keeps alive).
Result<Communicator> CreateChild(const internal::CommState& parent, int rank, int size,
                                 const std::string& suffix, Deadline deadline,
                                 std::chrono::milliseconds timeout) {
  CommOptions o = parent.options();
  o.rank = rank;
  o.size = size;
  o.store = parent.store();
  o.store_url.clear();
  o.host_store = false;
  o.secret = parent.secret();
  o.name += suffix;
  return internal::CreateUntil(o, deadline, timeout, parent.store_server());
}

}  // namespace

std::string internal::BadSplitColor(int color) {
  return "split: color (" + std::to_string(color) +
         ") must be >= 0, or Communicator::kNoColor (-1) for no group";
}

Result<std::optional<Communicator>> Communicator::Split(int color, int key,
                                                        const CallOptions& options) {
  internal::CommState& state = *state_;
  if (state.split()) {
    auto split = state.split()(color, key);
    if (!split.ok() && split.status().code() != StatusCode::kInvalidArgument) {
      state.Fail(split.status());
    }
    return split;
  }
  const std::chrono::milliseconds timeout = options.timeout.value_or(state.options().timeout);
  const Deadline deadline = internal::DeadlineAfter(timeout);
  if (color < kNoColor) {
    const std::string reason = internal::BadSplitColor(color);
    Status rejected = state.RejectCall(CollectiveKind::kAllGather, reason);
    if (rejected.code() != StatusCode::kInvalidArgument) {
      return Status(rejected.code(), "split: " + rejected.message());
    }
    return InvalidArgument(reason);
  }
  const int n = size();
  const int me = rank();
  const uint64_t number = state.next_call();
  std::vector<int64_t> all;
  CHORUS_RETURN_IF_ERROR(SplitGather(state, 0, color, key, timeout, &all));

  // The new group: ranks of this color by key, then by rank here.
  std::vector<std::pair<int64_t, int>> members;
  for (int r = 0; r < n; ++r) {
    const size_t at = static_cast<size_t>(kWords) * static_cast<size_t>(r);
    if (all[at + 2] == color) members.emplace_back(all[at + 3], r);
  }
  std::sort(members.begin(), members.end());

  std::optional<Communicator> made;
  if (color != kNoColor) {
    const auto mine =
        std::find_if(members.begin(), members.end(), [&](const auto& m) { return m.second == me; });
    auto created = CreateChild(
        state, static_cast<int>(mine - members.begin()), static_cast<int>(members.size()),
        "#" + std::to_string(number) + "." + std::to_string(color), deadline, timeout);
    if (!created.ok()) {
      // The split failed: so does this communicator, on every rank (their closing all-gather
      // ends at once), since the code alone must say whether it is usable.
      Status s(created.status().code(),
               "split: rank " + std::to_string(me) + " could not make its communicator of color " +
                   std::to_string(color) + ": " + created.status().message());
      state.Fail(s);
      return s;
    }
    made = std::move(created).value();
  }

  // Every group was made. Ranks started the split at different times, and a rank whose group
  // took its whole timeout to meet may come late: the closing call waits as long again.
  CHORUS_RETURN_IF_ERROR(
      SplitGather(state, 1, 0, 0, SaturatingAdd(Remaining(deadline), timeout), &all));
  return made;
}

// Shrink: the ranks kept meet as Create does, under this communicator's name, "~shrink" and a
// digest of the excluded ranks. Every attempt uses that name: the store's meeting runs each in
// a round of its own (core/meet.h), so a retry after a failed attempt, or a second shrink with
// the same list, meets afresh. No call on this communicator: it may have failed.
Result<Communicator> Communicator::Shrink(std::span<const int> exclude,
                                          const CallOptions& options) {
  internal::CommState& state = *state_;
  const int n = size();
  const int me = rank();
  std::vector<bool> out(static_cast<size_t>(n));
  for (const int r : exclude) {
    if (r < 0 || r >= n) {
      return InvalidArgument("shrink: exclude holds " + std::to_string(r) + ", not a rank in [0, " +
                             std::to_string(n) + ")");
    }
    if (out[static_cast<size_t>(r)]) {
      return InvalidArgument("shrink: exclude holds rank " + std::to_string(r) + " twice");
    }
    out[static_cast<size_t>(r)] = true;
  }
  if (out[static_cast<size_t>(me)]) {
    return InvalidArgument("shrink: exclude holds this rank (" + std::to_string(me) +
                           "): an excluded rank does not call Shrink");
  }
  const std::chrono::milliseconds timeout = options.timeout.value_or(state.options().timeout);
  if (timeout <= std::chrono::milliseconds(0)) {
    return InvalidArgument("shrink: options.timeout (" + std::to_string(timeout.count()) +
                           " ms) must be positive");
  }
  std::vector<int> keep;
  std::string excluded;  // the sorted list
  for (int r = 0; r < n; ++r) {
    if (!out[static_cast<size_t>(r)]) {
      keep.push_back(r);
    } else {
      excluded += (excluded.empty() ? "" : ",") + std::to_string(r);
    }
  }
  // A shrink that fails (other than for its arguments) fails this communicator too, if it had
  // not failed already: the code alone says whether a communicator is usable.
  const auto failed = [&](const Status& cause) {
    Status s(cause.code(), "shrink: " + cause.message());
    if (s.code() != StatusCode::kInvalidArgument) state.Fail(s);
    return s;
  };
  if (state.shrink()) {
    auto made = state.shrink()(keep);
    if (!made.ok()) return failed(made.status());
    return made;
  }
  char name[32];
  std::snprintf(name, sizeof(name), "~shrink-%016llx",
                static_cast<unsigned long long>(internal::Fnv1a(excluded)));
  auto made =
      CreateChild(state, static_cast<int>(std::find(keep.begin(), keep.end(), me) - keep.begin()),
                  static_cast<int>(keep.size()), name, internal::DeadlineAfter(timeout), timeout);
  if (!made.ok()) {
    // Ranks that pass different lists meet apart, and each waits for the ranks of its own.
    return failed(Status(
        made.status().code(),
        made.status().message() + (made.status().code() == StatusCode::kDeadlineExceeded
                                       ? " (ranks of the new communicator, leaving out " +
                                             (excluded.empty() ? std::string("none") : excluded) +
                                             ": do they all pass the same ranks to exclude?)"
                                       : "")));
  }
  return made;
}

}  // namespace chorus
