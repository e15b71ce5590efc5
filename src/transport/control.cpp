// Group control state (see control.h).
#include "transport/control.h"

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
  if (!fail_state_.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
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
  ranks()[rank].started.store(call_index + 1, std::memory_order_relaxed);
  ranks()[rank].active.store(call_index + 1, std::memory_order_release);
}

void Control::Depart(int rank) {
  ranks()[rank].departed.store(true, std::memory_order_release);
  RingAll();
}

std::string Control::Absentees(uint64_t call_index) const {
  std::string list;
  int missing = 0;
  for (int r = 0; r < size_; ++r) {
    if (ranks()[r].started.load(std::memory_order_relaxed) <= call_index) {
      list += (missing++ == 0 ? "" : ", ") + std::to_string(r);
    }
  }
  if (missing == 0) return "";
  return (missing == 1 ? "rank " + list + " has" : "ranks " + list + " have") +
         " not started call #" + std::to_string(call_index);
}

void Control::Reject(int rank, uint64_t call_index, const std::string& reason) {
  RankControl& me = ranks()[rank];
  const uint64_t n = me.rejections.fetch_add(1, std::memory_order_relaxed);
  const auto slot = static_cast<size_t>(n % kRejections);
  me.rejected_why[slot].Store(reason);
  me.rejected_call[slot].store(call_index + 1, std::memory_order_release);
  uint64_t latest = latest_rejection_.load(std::memory_order_relaxed);
  while (latest < call_index + 1 && !latest_rejection_.compare_exchange_weak(
                                        latest, call_index + 1, std::memory_order_acq_rel)) {
  }
  RingAll();
}

int Control::RejectionSlot(int rank, uint64_t call_index) const {
  for (int slot = 0; slot < kRejections; ++slot) {
    if (ranks()[rank].rejected_call[slot].load(std::memory_order_acquire) == call_index + 1) {
      return slot;
    }
  }
  return -1;
}

bool Control::Rejected(int rank, uint64_t call_index) const {
  if (latest_rejection_.load(std::memory_order_acquire) <= call_index) return false;
  for (int r = 0; r < size_; ++r) {
    if (r != rank && RejectionSlot(r, call_index) >= 0) return true;
  }
  return false;
}

Status Control::Rejection(int rank, uint64_t call_index) const {
  for (int r = 0; r < size_; ++r) {
    const int slot = r == rank ? -1 : RejectionSlot(r, call_index);
    if (slot >= 0) {
      return Aborted("rank " + std::to_string(r) + " rejected this call (" +
                     ranks()[r].rejected_why[slot].Load() + ")");
    }
  }
  return Status::Ok();
}

}  // namespace chorus::internal
