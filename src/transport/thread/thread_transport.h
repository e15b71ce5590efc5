// Thread transport: ranks are threads of one process and share its address space.
//
// Messages are pointers. A sender posts a pointer to a staging slot it filled, or straight to
// its own buffer (zero copy); the receiver reads the bytes where they are, so every hop costs
// one read by the receiver and no copy by the sender. Each ordered pair of ranks has a Mailbox
// (transport/control.h) created on first use, and the sender's `depth` staging slots,
// allocated and touched on first use and reused for the life of the group.
//
// Thread safety: a ThreadTransport is driven by its rank's thread; ThreadGroup is shared by all
// ranks' transports and synchronises through atomics.
#pragma once

#include <atomic>
#include <cstdlib>
#include <memory>
#include <vector>

#include "chorus/store.h"
#include "transport/control.h"
#include "transport/transport.h"

namespace chorus::internal {

// Joins ranks that called Communicator::Create from threads of this one process: rank 0 makes
// the group and publishes its address through `store`; the others take a reference to it.
Result<std::unique_ptr<Transport>> ConnectThreads(Store& store, const ConnectConfig& config);

class ThreadGroup {
 public:
  struct Link {
    Mailbox box;
    std::unique_ptr<std::byte[]> slots;  // sender-owned staging, depth * slot_bytes
  };

  ThreadGroup(int size, size_t slot_bytes, int depth);
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const { return control_->size(); }
  size_t slot_bytes() const { return slot_bytes_; }
  int depth() const { return depth_; }
  Control& control() { return *control_; }

  // The link from `src` to `dst`, created on first use by either side.
  Link& link(int src, int dst);

 private:
  const size_t slot_bytes_;
  const int depth_;
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> control_memory_;  // 64-byte aligned
  Control* control_;
  std::vector<std::atomic<Link*>> links_;  // size * size, row = sender
};

class ThreadTransport final : public ControlledTransport {
 public:
  ThreadTransport(std::shared_ptr<ThreadGroup> group, int rank);
  ~ThreadTransport() override { control_.Depart(rank_); }
  bool sees_peers_enter() const override { return true; }
  ThreadTransport(const ThreadTransport&) = delete;
  ThreadTransport& operator=(const ThreadTransport&) = delete;

  size_t slot_bytes() const override { return group_->slot_bytes(); }
  bool zero_copy() const override { return true; }
  bool slots_read_in_memory(int /*peer*/) const override { return true; }
  size_t inline_bytes() const override { return Mailbox::kInlineBytes; }
  int ranks_on_host() const override { return group_->size(); }

  bool TryCredit(int peer) override;
  void* TryReserve(int peer) override;
  void Post(int peer, const Message& m) override;
  bool TryPeek(int peer, Message* m, const CallTag* expect) override;
  void Release(int peer) override;
  bool Drained(int peer) override;

  // A thread rank "dies" when its communicator is destroyed.
  bool PeerAlive(int peer) override { return !control_.Departed(peer); }
  std::string DescribeDeath(int peer) const override {
    return "rank " + std::to_string(peer) + " destroyed its communicator";
  }

 private:
  std::shared_ptr<ThreadGroup> group_;
};

}  // namespace chorus::internal
