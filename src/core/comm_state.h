// The state behind a Communicator: its transport, options, sticky failure and counters.
// Thread safety: driven by the rank's thread; Abort() may come from any thread and only
// touches the transport's group failure, which is atomic.
#pragma once

#include <memory>
#include <vector>

#include "chorus/communicator.h"
#include "core/wait.h"
#include "transport/transport.h"

namespace chorus::internal {

class CommState {
 public:
  CommState(std::unique_ptr<Transport> transport, TransportKind kind, const CommOptions& options);

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  TransportKind transport() const { return kind_; }
  // Keeps the store server this rank hosts alive as long as the communicator.
  void HostStore(std::unique_ptr<TcpStoreServer> server) { store_server_ = std::move(server); }

  Status Run(CollectiveKind kind, ConstBuffer send, MutableBuffer recv, ReduceOp op,
             const CallOptions& options);
  void Abort();
  Status health() const;

  TrafficCounters traffic() const { return traffic_; }
  void ResetTraffic() { traffic_ = {}; }

 private:
  void Quiesce(uint64_t call);

  std::unique_ptr<TcpStoreServer> store_server_;
  std::unique_ptr<Transport> transport_;
  TransportKind kind_;
  CommOptions options_;
  WaitPolicy policy_;
  Status sticky_;
  // Working memory of the algorithms, allocated once: one segment for reducing in place, and
  // one operand pointer and message per rank for the direct algorithms.
  std::unique_ptr<std::byte[]> scratch_;
  std::vector<const void*> operands_;
  std::vector<Message> messages_;
  uint64_t calls_ = 0;  // every call, rejected ones included: ranks agree on it
  TrafficCounters traffic_;
};

}  // namespace chorus::internal
