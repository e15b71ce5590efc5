// Group control state (see control.h).
#include "transport/control.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace chorus::internal {

static_assert(sizeof(Control) % 64 == 0 && alignof(Control) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory control needs address-free atomics");

size_t Control::Bytes(int size) {
  return sizeof(Control) + sizeof(RankControl) * static_cast<size_t>(size);
}

Control* Control::Create(void* memory, int size) {
  auto* control = new (memory) Control(size);
  for (int r = 0; r < size; ++r) new (&control->ranks()[r]) RankControl();
  return control;
}

void Control::Text::Store(const std::string& s) {
  char buffer[sizeof(words)] = {};
  std::memcpy(buffer, s.data(), std::min(s.size(), sizeof(buffer) - 1));
  for (size_t i = 0; i < kMessageWords; ++i) {
    uint64_t w;
    std::memcpy(&w, buffer + i * sizeof(w), sizeof(w));
    words[i].store(w, std::memory_order_relaxed);
  }
}

std::string Control::Text::Load() const {
  char buffer[sizeof(words)];
  for (size_t i = 0; i < kMessageWords; ++i) {
    const uint64_t w = words[i].load(std::memory_order_relaxed);
    std::memcpy(buffer + i * sizeof(w), &w, sizeof(w));
  }
  buffer[sizeof(buffer) - 1] = '\0';
  return std::string(buffer);
}

void Control::RingAll() {
  for (int r = 0; r < size_; ++r) bell(r).Ring();
}

void Control::Fail(const Status& status) {
  uint32_t expected = 0;
  // seq_cst, as failed()'s load: a transport can then order a failure against its own flags
  // (TcpTransport::Adopt) without a fence, which TSan cannot model.
  if (!fail_state_.compare_exchange_strong(expected, 1, std::memory_order_seq_cst)) return;
  fail_code_.store(static_cast<int32_t>(status.code()), std::memory_order_relaxed);
  fail_message_.Store(status.message());
  fail_state_.store(2, std::memory_order_release);
  RingAll();
}

Status Control::failure() const {
  // The writer needs a few stores between states 1 and 2; a writer that died in between (a
  // killed process) must not hang the reader.
  const Clock::time_point give_up = Clock::now() + std::chrono::milliseconds(100);
  uint32_t state;
  while ((state = fail_state_.load(std::memory_order_acquire)) == 1) {
    if (Clock::now() > give_up) {
      return Unavailable("the group failed, but the rank recording why stopped midway");
    }
    YieldCpu();
  }
  if (state == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(fail_code_.load(std::memory_order_relaxed)),
                fail_message_.Load());
}

void Control::Enter(int rank, uint64_t call_index) {
  // Release: a peer that sees this rank entered (Entered(), the flag barrier) sees what it
  // wrote before, its call's tag included.
  ranks()[rank].started.store(call_index + 1, std::memory_order_release);
  ranks()[rank].active.store(call_index + 1, std::memory_order_release);
}

void Control::Depart(int rank) {
  ranks()[rank].departed.store(true, std::memory_order_release);
  RingAll();
}

PeerState Control::StateOf(int rank, Clock::time_point now) {
  RankControl& r = ranks()[rank];
  PeerState state;
  state.started = r.started.load(std::memory_order_acquire);
  state.active = static_cast<int64_t>(r.active.load(std::memory_order_acquire)) - 1;
  state.waiting_for = r.beacon.waiting_for.load(std::memory_order_relaxed) - 1;
  const int64_t beat = r.beacon.beat_ns.load(std::memory_order_relaxed);
  if (beat != 0) {
    state.idle_seconds = std::max(
        0.0, std::chrono::duration<double>(now.time_since_epoch() - Clock::duration(beat)).count());
  }
  state.has_call = ReadCall(r.beacon, &state.call);
  return state;
}

void Control::Reject(int rank, uint64_t call_index, const std::string& reason) {
  RankControl& me = ranks()[rank];
  const uint64_t n = me.rejections.fetch_add(1, std::memory_order_relaxed);
  const auto reason_slot = static_cast<size_t>(n % kReasons);
  // The reason first: a peer that sees the call rejected can read why.
  me.reason_call[reason_slot].store(0, std::memory_order_release);
  me.rejected_why[reason_slot].Store(reason);
  me.reason_call[reason_slot].store(call_index + 1, std::memory_order_release);
  me.rejected_call[n % kRejections].store(call_index + 1, std::memory_order_release);
  uint64_t latest = latest_rejection_.load(std::memory_order_relaxed);
  while (latest < call_index + 1 && !latest_rejection_.compare_exchange_weak(
                                        latest, call_index + 1, std::memory_order_acq_rel)) {
  }
  RingAll();
}

bool Control::RejectedBy(int rank, uint64_t call_index) const {
  for (const auto& call : ranks()[rank].rejected_call) {
    if (call.load(std::memory_order_acquire) == call_index + 1) return true;
  }
  return false;
}

int Control::ReasonSlot(int rank, uint64_t call_index) const {
  for (int slot = 0; slot < kReasons; ++slot) {
    if (ranks()[rank].reason_call[slot].load(std::memory_order_acquire) == call_index + 1) {
      return slot;
    }
  }
  return -1;
}

bool Control::Rejected(int rank, uint64_t call_index) const {
  if (latest_rejection_.load(std::memory_order_acquire) <= call_index) return false;
  for (int r = 0; r < size_; ++r) {
    if (r != rank && RejectedBy(r, call_index)) return true;
  }
  return false;
}

bool Control::Abandoned(uint64_t call_index) const {
  if (latest_rejection_.load(std::memory_order_acquire) <= call_index) return false;
  for (int r = 0; r < size_; ++r) {
    if (RejectedBy(r, call_index)) return true;
  }
  return false;
}

Status Control::Rejection(int rank, uint64_t call_index) const {
  for (int r = 0; r < size_; ++r) {
    if (r == rank || !RejectedBy(r, call_index)) continue;
    const int slot = ReasonSlot(r, call_index);
    const std::string why =
        slot >= 0 ? ranks()[r].rejected_why[slot].Load() : std::string("its reason is lost");
    // The reason may have been overwritten between the two reads; only a match counts.
    const bool current = slot >= 0 && ReasonSlot(r, call_index) == slot;
    return InvalidArgument("rank " + std::to_string(r) + " rejected this call (" +
                           (current ? why : std::string("its reason is lost")) + ")");
  }
  return Status::Ok();
}

std::vector<PeerState> ControlledTransport::Census(uint64_t, Deadline) {
  const Clock::time_point now = Clock::now();
  std::vector<PeerState> states;
  for (int r = 0; r < size(); ++r) {
    states.push_back(control_.StateOf(r, now));
    if (r != rank_) states.back().alive = PeerAlive(r);
  }
  return states;
}

}  // namespace chorus::internal
