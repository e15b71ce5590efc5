// Shared-memory transport: ranks are processes on one host.
//
// One segment per communicator holds everything the ranks share:
//
//   [Prelude][Control][Mailbox x p*p][staging: p*p links x depth slots x slot_bytes]
//
// Control and Mailbox are the same structures the thread transport uses (transport/control.h);
// here they live in the segment, and the futex doorbells wake across processes. A message is a
// segment offset: the sender copies (or reduces) into its staging slot for the receiver, and
// the receiver reads or reduces straight out of it, so a ring hop costs one write and one read
// of shared memory. Staging pages are touched once at setup; pairs an algorithm never uses stay
// untouched and cost no memory.
//
// A peer that exits is only an error for a rank that still needs something from it: waits
// poll the pidfd of the peer they wait on, so a rank that finished its part and left does not
// fail the others.
//
// Rank 0 creates the segment under a random name and publishes the name through the store; the
// last rank to attach unlinks it, so nothing is left in /dev/shm once the group is up, even if
// every process is later killed. Each rank holds a pidfd per peer: a dead peer fails the group
// with kUnavailable naming it, well before any deadline.
//
// Thread safety: a ShmTransport is driven by its rank's thread; Fail() from any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "transport/control.h"
#include "transport/transport.h"

namespace chorus::internal {

// Sets up (rank 0) or joins (the others) the communicator's segment through `store`, in
// `shm_dir` (empty: /dev/shm, CommOptions::shm_dir).
Result<std::unique_ptr<Transport>> ConnectShm(Store& store, const ConnectConfig& config,
                                              const std::string& shm_dir = {});

class ShmSegment;

class ShmTransport final : public ControlledTransport {
 public:
  ShmTransport(std::unique_ptr<ShmSegment> segment, const ConnectConfig& config,
               std::vector<int> peer_pidfds);
  ~ShmTransport() override;
  bool sees_peers_enter() const override { return true; }

  size_t slot_bytes() const override { return slot_bytes_; }
  // Staged copies pipeline best in segments that stay in the cache between the sender's copy
  // in and the receiver's copy out (docs/algorithms.md, "Segments through shared memory").
  size_t default_segment_bytes() const override {
    return std::min(slot_bytes_, kCachedSegmentBytes);
  }
  static constexpr size_t kCachedSegmentBytes = size_t{256} << 10;
  bool zero_copy() const override { return false; }
  bool shares_slots() const override { return true; }
  bool slots_read_in_memory(int /*peer*/) const override { return true; }
  size_t inline_bytes() const override { return Mailbox::kInlineBytes; }
  int ranks_on_host() const override { return size_; }

  bool TryCredit(int peer) override;
  void* TryReserve(int peer) override;
  void Post(int peer, const Message& m) override;
  bool TryPeek(int peer, Message* m, const CallTag* expect) override;
  void Release(int peer) override;
  bool Drained(int peer) override;

  bool PeerAlive(int peer) override;
  std::string DescribeDeath(int peer) const override;

 private:
  Mailbox& box(int src, int dst);
  std::byte* slot(int src, int dst, uint64_t index);

  std::unique_ptr<ShmSegment> segment_;
  std::byte* base_;
  Mailbox* boxes_;
  std::byte* staging_;
  const int size_;
  const size_t slot_bytes_;
  const int depth_;
  const size_t segment_bytes_;
  std::vector<int> pidfds_;                    // per rank; -1 for self
  std::vector<Clock::time_point> next_check_;  // per rank: when to poll its pidfd again
};

}  // namespace chorus::internal
