// The MPI transport's group notices (see mpi_notice.h): failures and rejections sent to every
// peer, and the census that asks the peers about a call and reads their answers.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "transport/mpi/mpi_notice.h"
#include "transport/mpi/mpi_transport.h"

namespace chorus::internal {

bool MpiTransport::RecordFailure(const Status& status) {
  const bool first = !control_.failed();
  control_.Fail(status);
  if (first) failure_unsent_.store(true, std::memory_order_release);
  return first;
}

void MpiTransport::FailMpi(const std::string& what, int code) { Fail(MpiError(what, code)); }

void MpiTransport::Fail(const Status& status) {
  if (!RecordFailure(status)) return;  // a peer's failure (it told everyone) or an earlier one
  if (!MayCallMpiHere()) return;       // the driving thread sends it at its next poll
  std::lock_guard lock(control_mutex_);
  PollControlLocked();
}

void MpiTransport::Enter(uint64_t call_index) {
  driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  ControlledTransport::Enter(call_index);
  if (failure_unsent_.load(std::memory_order_acquire)) PollControl();
}

void MpiTransport::Reject(uint64_t call_index, const std::string& reason) {
  driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  ControlledTransport::Reject(call_index, reason);
  std::lock_guard lock(control_mutex_);
  SendNoticeLocked(Notice(Notice::kRejection, StatusCode::kAborted, call_index, reason));
}

std::vector<PeerState> MpiTransport::Ask(uint64_t call_index, Deadline until, bool fresh_only) {
  std::vector<PeerState> states(static_cast<size_t>(size()));
  if (!MayCallMpiHere()) {
    for (PeerState& s : states) s.known = false;
    return states;
  }
  // Only answers to a census count: one given earlier in the call (to a glance) may be from
  // before the peer stopped, and would show it waiting.
  std::vector<uint64_t> asked(static_cast<size_t>(size()));
  {
    std::lock_guard lock(control_mutex_);
    if (fresh_only) asked = replies_;
    SendNoticeLocked(Notice(Notice::kProbe, StatusCode::kOk, call_index, ""));
  }
  const auto fresh = [&](size_t q) {  // under control_mutex_
    return replies_[q] > asked[q] && answered_[q] == call_index + 1;
  };
  const auto all_answered = [&] {
    std::lock_guard lock(control_mutex_);  // another thread may poll (MPI_THREAD_MULTIPLE)
    for (int peer = 0; peer < size(); ++peer) {
      if (peer != rank_ && !fresh(static_cast<size_t>(peer))) return false;
    }
    return true;
  };
  for (;;) {
    PollControl();
    const Clock::time_point now = Clock::now();
    if (all_answered() || now >= until) break;
    beacon().Beat(now);  // alive, and asking: peers' censuses must not find this rank idle
    // Nothing rings for MPI: look again shortly, without holding the core.
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::lock_guard lock(control_mutex_);
  for (int peer = 0; peer < size(); ++peer) {
    const auto q = static_cast<size_t>(peer);
    if (peer == rank_) {
      states[q] = control_.StateOf(rank_, Clock::now());
    } else if (fresh(q)) {
      states[q] = answers_[q];
    } else {
      states[q].answered = false;
    }
  }
  return states;
}

void MpiTransport::PollControl() {
  std::lock_guard lock(control_mutex_);
  PollControlLocked();
}

void MpiTransport::PollControlLocked() {
  // Peers' notices. Applied to the Control block directly: they are the peers' own news, and
  // every peer already sent them to every rank.
  while (incoming_request_ != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_Status status;
    if (const int rc = MPI_Test(&incoming_request_, &done, &status); rc != MPI_SUCCESS) {
      RecordFailure(MpiError("a receive of group notices", rc));
      break;
    }
    if (!done) break;
    ++notices_received_[static_cast<size_t>(status.MPI_SOURCE)];
    const Notice& notice = *incoming_;
    if (notice.kind == Notice::kFailure) {
      control_.Fail(Status(static_cast<StatusCode>(notice.code), notice.message()));
    } else if (notice.kind == Notice::kRejection && status.MPI_SOURCE != rank_) {
      control_.Reject(status.MPI_SOURCE, notice.call_index, notice.message());
    } else if (notice.kind == Notice::kProbe && status.MPI_SOURCE != rank_) {
      const PeerState me = control_.StateOf(rank_, Clock::now());
      Notice answer(Notice::kAnswer, StatusCode::kOk, notice.call_index, "");
      answer.started = me.started;
      answer.active = me.active;
      answer.waiting_for = me.waiting_for;
      answer.idle_ms = me.idle_seconds < 0 ? -1 : static_cast<int64_t>(me.idle_seconds * 1000);
      answer.failed = control_.failed() ? 1 : 0;
      if (me.has_call) {
        answer.has_call = 1;
        PackTag(me.call, answer.call_words);
      }
      SendNoticeLocked(answer, status.MPI_SOURCE);
    } else if (notice.kind == Notice::kAnswer) {
      const auto from = static_cast<size_t>(status.MPI_SOURCE);
      PeerState& state = answers_[from];
      state.started = notice.started;
      state.active = notice.active;
      state.waiting_for = notice.waiting_for;
      state.idle_seconds = notice.idle_ms < 0 ? -1.0 : static_cast<double>(notice.idle_ms) / 1000;
      state.failed = notice.failed != 0;
      state.has_call = notice.has_call != 0 && UnpackTag(notice.call_words, &state.call);
      answered_[from] = notice.call_index + 1;
      ++replies_[from];
    }
    if (const int rc = MPI_Irecv(incoming_.get(), sizeof(Notice), MPI_BYTE, MPI_ANY_SOURCE,
                                 kNoticeTag, comm_, &incoming_request_);
        rc != MPI_SUCCESS) {
      RecordFailure(MpiError("MPI_Irecv of group notices", rc));
    }
  }
  // Notices of ours that every peer has taken.
  std::erase_if(outgoing_, [](Outgoing& o) {
    int done = 0;
    MPI_Testall(static_cast<int>(o.requests.size()), o.requests.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  });
  if (!closing_ && failure_unsent_.exchange(false, std::memory_order_acq_rel)) {
    const Status failure = control_.failure();
    SendNoticeLocked(Notice(Notice::kFailure, failure.code(), 0, failure.message()));
  }
}

void MpiTransport::SendNoticeLocked(const Notice& notice, int only) {
  if (closing_) return;
  Outgoing out{std::make_unique<Notice>(notice), {}};
  out.requests.reserve(static_cast<size_t>(size() - 1));
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_ || (only >= 0 && peer != only)) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc =
        MPI_Isend(out.notice.get(), sizeof(Notice), MPI_BYTE, peer, kNoticeTag, comm_, &request);
    if (rc != MPI_SUCCESS) {
      RecordFailure(MpiError("MPI_Isend of a group notice to rank " + std::to_string(peer), rc));
      continue;
    }
    out.requests.push_back(request);
    ++notices_sent_[static_cast<size_t>(peer)];
  }
  if (!out.requests.empty()) outgoing_.push_back(std::move(out));
}

}  // namespace chorus::internal
