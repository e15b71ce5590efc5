// Communicator::Split: the ranks that pass one color become a new communicator.
//
//   1. An all-gather on this communicator gives every rank every rank's color and key, so each
//      knows its new group, its rank in it (by key, then by old rank) and its size.
//   2. Each group meets as Communicator::Create does, through the store this communicator met
//      through, under a name of its own: this communicator's, the split's number (the same on
//      every rank, since every rank makes every split) and the color. MPI ranks split their
//      MPI communicator instead.
//   3. An all-reduce on this communicator tells every rank whether every group was made, so
//      that all return alike; it also keeps rank 0's store server (when it hosts one) in this
//      call until the last group has met.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/comm_state.h"

namespace chorus {

using internal::Clock;
using internal::Deadline;
using internal::Remaining;

Result<std::optional<Communicator>> Communicator::Split(int color, int key,
                                                        const CallOptions& options) {
  internal::CommState& state = *state_;
  const uint64_t number = state.NextSplit();
  const std::chrono::milliseconds timeout = options.timeout.value_or(state.options().timeout);
  const Deadline deadline = internal::DeadlineAfter(timeout);
  if (color < kNoColor) {
    const std::string reason = "split's color (" + std::to_string(color) +
                               ") must be >= 0, or Communicator::kNoColor (-1) for no group";
    Status rejected = state.RejectCall(CollectiveKind::kAllGather, reason);
    if (rejected.code() != StatusCode::kInvalidArgument) return rejected;
    return InvalidArgument("split: color (" + std::to_string(color) +
                           ") must be >= 0, or Communicator::kNoColor (-1) for no group");
  }
  const int n = size();
  const int me = rank();
  const std::vector<int64_t> mine = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(n));
  if (Status s = AllGather(std::span<const int64_t>(mine), std::span<int64_t>(all),
                           {.timeout = timeout});
      !s.ok()) {
    return Status(s.code(), "split: " + s.message());
  }

  // The new group: ranks of this color by key, then by rank here.
  std::vector<std::pair<int64_t, int>> members;
  for (int r = 0; r < n; ++r) {
    if (all[2 * static_cast<size_t>(r)] == color) {
      members.emplace_back(all[2 * static_cast<size_t>(r) + 1], r);
    }
  }
  std::sort(members.begin(), members.end());

  std::optional<Communicator> made;
  Status mine_status;
  if (state.split()) {
    auto split = state.split()(color, key);
    if (split.ok()) {
      made = std::move(split).value();
    } else {
      mine_status = split.status();
    }
  } else if (color != kNoColor) {
    CommOptions o = state.options();
    o.rank = static_cast<int>(
        std::find_if(members.begin(), members.end(), [&](const auto& m) { return m.second == me; }) -
        members.begin());
    o.size = static_cast<int>(members.size());
    o.store = state.store();
    o.store_url.clear();
    o.host_store = false;
    o.secret = state.secret();
    o.name += "#" + std::to_string(number) + "." + std::to_string(color);
    auto created = internal::CreateUntil(o, deadline);
    if (created.ok()) {
      created->state_->KeepStore(state.store(), state.secret(), state.store_server());
      made = std::move(created).value();
    } else {
      mine_status = created.status();
    }
  }

  // Whether every rank has its group. A rank whose group failed to meet returns at once, while
  // the rest of its group waits for it to the deadline: the closing call waits as long again.
  const int32_t failed_mine = mine_status.ok() ? 0 : me + 1;
  int32_t failed = 0;
  const auto agree_timeout = Remaining(deadline) + timeout;
  if (Status s = AllReduce(std::span<const int32_t>(&failed_mine, 1), std::span<int32_t>(&failed, 1),
                           ReduceOp::kMax, {.timeout = agree_timeout});
      !s.ok()) {
    return Status(s.code(), "split: " + s.message());
  }
  if (!mine_status.ok()) return Status(mine_status.code(), "split: " + mine_status.message());
  if (failed != 0) {
    return FailedPrecondition("split: rank " + std::to_string(failed - 1) +
                              " could not make its new communicator (its own error says why); "
                              "this one is still usable");
  }
  return made;
}

}  // namespace chorus
