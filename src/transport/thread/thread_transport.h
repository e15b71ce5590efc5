// Thread transport: ranks are threads of one process and share its address space.
//
// Messages are pointers. A sender posts a pointer to a staging slot it filled, or straight to
// its own buffer (zero copy); the receiver reads the bytes where they are, so every hop costs
// one read by the receiver and no copy by the sender. Each ordered pair of ranks has a mailbox:
// a ring of `depth` message descriptors with a head (written only by the sender) and a tail
// (written only by the receiver), plus the sender's `depth` staging slots, allocated and
// touched on first use and reused for the life of the group.
//
// Thread safety: a ThreadTransport is driven by its rank's thread; ThreadGroup is shared by all
// ranks' transports and synchronises through atomics (see each member).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace chorus::internal {

inline constexpr int kMaxPipelineDepth = 16;

class ThreadGroup {
 public:
  struct alignas(64) Mailbox {
    alignas(64) std::atomic<uint64_t> head{0};  // messages posted; written by the sender
    alignas(64) std::atomic<uint64_t> tail{0};  // messages released; written by the receiver
    Message ring[kMaxPipelineDepth];
    std::unique_ptr<std::byte[]> slots;  // sender-owned staging, depth * slot_bytes
  };

  ThreadGroup(int size, size_t slot_bytes, int depth);
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  int depth() const { return depth_; }

  // The mailbox from `src` to `dst`, created on first use by either side.
  Mailbox& box(int src, int dst);
  Doorbell& bell(int rank) { return bells_[static_cast<size_t>(rank)]; }

  void Fail(const Status& status);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status failure() const;

  void Enter(int rank, uint64_t call_index) {
    started_[static_cast<size_t>(rank)].store(call_index + 1, std::memory_order_relaxed);
  }
  std::string Absentees(uint64_t call_index) const;

  void Reject(int rank, uint64_t call_index, const std::string& reason);
  Status Rejection(int rank, uint64_t call_index) const;
  // Lock-free: true when some rank other than `rank` rejected exactly `call_index`.
  bool Rejected(int rank, uint64_t call_index) const;

 private:
  void RingAll();

  const int size_;
  const size_t slot_bytes_;
  const int depth_;
  std::vector<std::atomic<Mailbox*>> boxes_;  // size * size, row = sender
  std::vector<Doorbell> bells_;

  std::vector<std::atomic<uint64_t>> started_;  // per rank: calls started (for diagnostics)
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  Status failure_;                          // guarded by mu_
  std::vector<std::atomic<uint64_t>> rejected_call_;  // per rank: call index + 1, 0 = none
  std::vector<std::string> rejected_why_;             // guarded by mu_
  std::atomic<uint64_t> latest_rejection_{0};  // max of rejected_call_, to skip the scan
};

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(std::shared_ptr<ThreadGroup> group, int rank);

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  size_t slot_bytes() const override { return group_->slot_bytes(); }
  bool zero_copy() const override { return true; }
  int ranks_on_host() const override { return group_->size(); }

  void* TryReserve(int peer) override;
  void Post(int peer, const Message& m) override;
  bool TryPeek(int peer, Message* m) override;
  void Release(int peer) override;
  bool Drained(int peer) override;

  Doorbell& doorbell() override { return group_->bell(rank_); }

  void Fail(const Status& status) override { group_->Fail(status); }
  bool failed() const override { return group_->failed(); }
  Status failure() const override { return group_->failure(); }

  void Enter(uint64_t call_index) override { group_->Enter(rank_, call_index); }
  std::string Absentees(uint64_t call_index) const override {
    return group_->Absentees(call_index);
  }

  void Reject(uint64_t call_index, const std::string& reason) override {
    group_->Reject(rank_, call_index, reason);
  }
  Status Rejection(uint64_t call_index) const override {
    return group_->Rejection(rank_, call_index);
  }
  bool Rejected(uint64_t call_index) const override {
    return group_->Rejected(rank_, call_index);
  }

 private:
  std::shared_ptr<ThreadGroup> group_;
  const int rank_;
};

}  // namespace chorus::internal
