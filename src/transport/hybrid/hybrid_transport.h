// Hybrid transport: shared memory between the ranks of a host, TCP between hosts.
//
// For a group whose ranks span hosts with several ranks on each. Messages to a peer on this
// host go through the host's shm segment (local ranks numbered by their place on the host),
// messages to other hosts through TCP (global ranks). Both halves ring one doorbell, the shm
// one, so a rank waits on both at once. hosts() gives the layout that hierarchical schedules
// need (algo/hierarchical.h); the flat ring also runs over it, with its intra-host hops on shm.
//
// Group state: a failure goes to both halves (shm tells the host at once, TCP floods the
// others), also one that arrives through either half: failed() passes it across when it
// first sees it. Rejections travel over TCP only, so that they name global ranks.
//
// Thread safety: as Transport.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace chorus::internal {

class HybridTransport final : public Transport {
 public:
  // `shm` connects this host's ranks (layout.local, by local index); `tcp` every rank.
  HybridTransport(std::unique_ptr<Transport> shm, std::unique_ptr<Transport> tcp,
                  HostLayout layout);

  int rank() const override { return tcp_->rank(); }
  int size() const override { return tcp_->size(); }
  size_t slot_bytes() const override { return tcp_->slot_bytes(); }
  bool zero_copy() const override { return false; }
  bool slots_read_in_memory(int peer) const override { return Local(peer) >= 0; }
  int ranks_on_host() const override { return layout_.local_size; }
  const HostLayout* hosts() const override { return &layout_; }

  bool TryCredit(int peer) override;
  void* TryReserve(int peer) override;
  void Post(int peer, const Message& m) override;
  bool TryPeek(int peer, Message* m, const CallTag* expect) override;
  bool Linked(int peer) override { return Local(peer) >= 0 || tcp_->Linked(peer); }
  void Release(int peer) override;
  bool Drained(int peer) override;
  bool PeerAlive(int peer) override;
  std::string DescribeDeath(int peer) const override;
  bool DiedUnheard(int peer) const override {
    return Local(peer) < 0 && tcp_->DiedUnheard(peer);
  }

  Doorbell& doorbell() override { return shm_->doorbell(); }
  void Fail(const Status& status) override;
  bool failed() const override;
  Status failure() const override;

  void Enter(uint64_t call_index) override;
  void Leave() override;
  bool PeerActive(int peer, uint64_t call_index) const override;
  Beacon& beacon() override { return shm_->beacon(); }
  // Over TCP, which reaches every rank it is connected to (its replies read the shm beacon,
  // TcpConfig::beacon); this host's ranks, which TCP may never have connected, from their shm
  // control blocks.
  std::vector<PeerState> Census(uint64_t call_index, Deadline until) override;
  std::vector<PeerState> Glance(uint64_t call_index) override;
  void Reject(uint64_t call_index, const std::string& reason) override;
  Status Rejection(uint64_t call_index) const override { return tcp_->Rejection(call_index); }
  bool Rejected(uint64_t call_index) const override { return tcp_->Rejected(call_index); }
  bool Abandoned(uint64_t call_index) const override { return tcp_->Abandoned(call_index); }

 private:
  // `peer`'s index on this host, or -1 when it is on another host.
  int Local(int peer) const { return local_of_[static_cast<size_t>(peer)]; }
  std::vector<PeerState> Merged(std::vector<PeerState> states,
                                const std::vector<PeerState>& local) const;

  std::unique_ptr<Transport> shm_;
  std::unique_ptr<Transport> tcp_;
  HostLayout layout_;
  std::vector<int> local_of_;
};

}  // namespace chorus::internal
