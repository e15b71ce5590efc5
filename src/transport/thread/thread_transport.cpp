// Thread transport (see thread_transport.h).
#include "transport/thread/thread_transport.h"

#include <cstring>

namespace chorus::internal {

ThreadGroup::ThreadGroup(int size, size_t slot_bytes, int depth)
    : size_(size),
      slot_bytes_(slot_bytes),
      depth_(depth),
      boxes_(static_cast<size_t>(size) * static_cast<size_t>(size)),
      bells_(static_cast<size_t>(size)),
      started_(static_cast<size_t>(size)),
      rejected_call_(static_cast<size_t>(size)),
      rejected_why_(static_cast<size_t>(size)) {
  for (auto& box : boxes_) box.store(nullptr, std::memory_order_relaxed);
}

ThreadGroup::~ThreadGroup() {
  for (auto& box : boxes_) delete box.load(std::memory_order_relaxed);
}

ThreadGroup::Mailbox& ThreadGroup::box(int src, int dst) {
  std::atomic<Mailbox*>& cell = boxes_[static_cast<size_t>(src) * size_ + dst];
  Mailbox* box = cell.load(std::memory_order_acquire);
  if (box != nullptr) return *box;
  auto fresh = std::make_unique<Mailbox>();
  if (cell.compare_exchange_strong(box, fresh.get(), std::memory_order_acq_rel)) {
    return *fresh.release();
  }
  return *box;  // the other side won the race
}

void ThreadGroup::RingAll() {
  for (Doorbell& bell : bells_) bell.Ring();
}

void ThreadGroup::Fail(const Status& status) {
  {
    std::lock_guard lock(mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    failure_ = status;
    failed_.store(true, std::memory_order_release);
  }
  RingAll();
}

Status ThreadGroup::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

std::string ThreadGroup::Absentees(uint64_t call_index) const {
  std::string ranks;
  int missing = 0;
  for (int r = 0; r < size_; ++r) {
    if (started_[static_cast<size_t>(r)].load(std::memory_order_relaxed) <= call_index) {
      ranks += (missing++ == 0 ? "" : ", ") + std::to_string(r);
    }
  }
  if (missing == 0) return "";
  return (missing == 1 ? "rank " + ranks + " has" : "ranks " + ranks + " have") +
         " not started call #" + std::to_string(call_index);
}

void ThreadGroup::Reject(int rank, uint64_t call_index, const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    rejected_why_[static_cast<size_t>(rank)] = reason;
    rejected_call_[static_cast<size_t>(rank)].store(call_index + 1, std::memory_order_release);
    if (latest_rejection_.load(std::memory_order_relaxed) < call_index + 1) {
      latest_rejection_.store(call_index + 1, std::memory_order_release);
    }
  }
  RingAll();
}

Status ThreadGroup::Rejection(int rank, uint64_t call_index) const {
  std::lock_guard lock(mu_);
  for (int r = 0; r < size_; ++r) {
    if (r != rank && rejected_call_[static_cast<size_t>(r)].load() == call_index + 1) {
      return Aborted("rank " + std::to_string(r) + " rejected this call (" +
                     rejected_why_[static_cast<size_t>(r)] + ")");
    }
  }
  return Status::Ok();
}

bool ThreadGroup::Rejected(int rank, uint64_t call_index) const {
  if (latest_rejection_.load(std::memory_order_acquire) <= call_index) return false;
  for (int r = 0; r < size_; ++r) {
    if (r != rank &&
        rejected_call_[static_cast<size_t>(r)].load(std::memory_order_acquire) == call_index + 1) {
      return true;
    }
  }
  return false;
}

ThreadTransport::ThreadTransport(std::shared_ptr<ThreadGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

void* ThreadTransport::TryReserve(int peer) {
  ThreadGroup::Mailbox& box = group_->box(rank_, peer);
  const uint64_t head = box.head.load(std::memory_order_relaxed);
  const int depth = group_->depth();
  if (head - box.tail.load(std::memory_order_acquire) >= static_cast<uint64_t>(depth)) {
    return nullptr;
  }
  if (!box.slots) {  // first use of this link: allocate and touch once, reuse forever
    const size_t bytes = group_->slot_bytes() * static_cast<size_t>(depth);
    box.slots = std::make_unique<std::byte[]>(bytes);
    std::memset(box.slots.get(), 0, bytes);
  }
  return box.slots.get() + (head % static_cast<uint64_t>(depth)) * group_->slot_bytes();
}

void ThreadTransport::Post(int peer, const Message& m) {
  ThreadGroup::Mailbox& box = group_->box(rank_, peer);
  const uint64_t head = box.head.load(std::memory_order_relaxed);
  box.ring[head % static_cast<uint64_t>(group_->depth())] = m;
  box.head.store(head + 1, std::memory_order_release);
  group_->bell(peer).Ring();
}

bool ThreadTransport::TryPeek(int peer, Message* m) {
  ThreadGroup::Mailbox& box = group_->box(peer, rank_);
  const uint64_t tail = box.tail.load(std::memory_order_relaxed);
  if (box.head.load(std::memory_order_acquire) == tail) return false;
  *m = box.ring[tail % static_cast<uint64_t>(group_->depth())];
  return true;
}

void ThreadTransport::Release(int peer) {
  ThreadGroup::Mailbox& box = group_->box(peer, rank_);
  box.tail.store(box.tail.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  group_->bell(peer).Ring();
}

bool ThreadTransport::Drained(int peer) {
  ThreadGroup::Mailbox& box = group_->box(rank_, peer);
  return box.tail.load(std::memory_order_acquire) == box.head.load(std::memory_order_relaxed);
}

}  // namespace chorus::internal
