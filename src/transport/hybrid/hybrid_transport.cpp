// Hybrid transport (see hybrid_transport.h): every call is routed by where the peer is.
#include "transport/hybrid/hybrid_transport.h"

namespace chorus::internal {

HybridTransport::HybridTransport(std::unique_ptr<Transport> shm, std::unique_ptr<Transport> tcp,
                                 HostLayout layout)
    : shm_(std::move(shm)),
      tcp_(std::move(tcp)),
      layout_(std::move(layout)),
      local_of_(static_cast<size_t>(tcp_->size()), -1) {
  for (size_t i = 0; i < layout_.local.size(); ++i) {
    local_of_[static_cast<size_t>(layout_.local[i])] = static_cast<int>(i);
  }
}

bool HybridTransport::TryCredit(int peer) {
  const int l = Local(peer);
  return l >= 0 ? shm_->TryCredit(l) : tcp_->TryCredit(peer);
}

void* HybridTransport::TryReserve(int peer) {
  const int l = Local(peer);
  return l >= 0 ? shm_->TryReserve(l) : tcp_->TryReserve(peer);
}

void HybridTransport::Post(int peer, const Message& m) {
  const int l = Local(peer);
  l >= 0 ? shm_->Post(l, m) : tcp_->Post(peer, m);
}

bool HybridTransport::TryPeek(int peer, Message* m, const CallTag* expect) {
  const int l = Local(peer);
  return l >= 0 ? shm_->TryPeek(l, m, expect) : tcp_->TryPeek(peer, m, expect);
}

void HybridTransport::Release(int peer) {
  const int l = Local(peer);
  l >= 0 ? shm_->Release(l) : tcp_->Release(peer);
}

bool HybridTransport::Drained(int peer) {
  const int l = Local(peer);
  return l >= 0 ? shm_->Drained(l) : tcp_->Drained(peer);
}

bool HybridTransport::PeerAlive(int peer) {
  const int l = Local(peer);
  return l >= 0 ? shm_->PeerAlive(l) : tcp_->PeerAlive(peer);
}

std::string HybridTransport::DescribeDeath(int peer) const {
  const int l = Local(peer);
  if (l < 0) return tcp_->DescribeDeath(peer);
  // The shm half numbers ranks by their place on the host: "rank 1 (pid 42) exited".
  const std::string text = shm_->DescribeDeath(l);
  const size_t after_number = text.find(' ', 5);
  return "rank " + std::to_string(peer) +
         (after_number == std::string::npos ? "" : text.substr(after_number));
}

void HybridTransport::Fail(const Status& status) {
  shm_->Fail(status);
  tcp_->Fail(status);
}

bool HybridTransport::failed() const {
  const bool shm = shm_->failed();
  const bool tcp = tcp_->failed();
  // A failure that reached one half (a kFail frame, a local peer's Fail) goes on to the other,
  // so that it reaches this host's ranks and the connected hosts alike.
  if (shm != tcp) shm ? tcp_->Fail(shm_->failure()) : shm_->Fail(tcp_->failure());
  return shm || tcp;
}

Status HybridTransport::failure() const {
  if (!failed()) return Status::Ok();  // failed() also passes a failure across
  return shm_->failed() ? shm_->failure() : tcp_->failure();
}

void HybridTransport::Enter(uint64_t call_index) {
  shm_->Enter(call_index);
  tcp_->Enter(call_index);
}

void HybridTransport::Leave() {
  shm_->Leave();
  tcp_->Leave();
}

bool HybridTransport::PeerActive(int peer, uint64_t call_index) const {
  const int l = Local(peer);
  return l >= 0 && shm_->PeerActive(l, call_index);
}

void HybridTransport::Reject(uint64_t call_index, const std::string& reason) {
  tcp_->Reject(call_index, reason);
}

std::vector<PeerState> HybridTransport::Census(uint64_t call_index, Deadline until) {
  return Merged(tcp_->Census(call_index, until), shm_->Census(call_index, until));
}

std::vector<PeerState> HybridTransport::Glance(uint64_t call_index) {
  return Merged(tcp_->Glance(call_index), shm_->Glance(call_index));
}

// This host's ranks as shared memory sees them, the others as TCP does.
std::vector<PeerState> HybridTransport::Merged(std::vector<PeerState> states,
                                               const std::vector<PeerState>& local) const {
  for (size_t i = 0; i < local.size() && i < layout_.local.size(); ++i) {
    states[static_cast<size_t>(layout_.local[i])] = local[i];
  }
  return states;
}

}  // namespace chorus::internal
