// chorus/options.h: aggregate options for communicators and for single calls.
//
// Options are plain aggregates with defaults; set what you need with designated initialisers:
//
//   chorus::CommOptions opts{.timeout = std::chrono::seconds(5)};
//   auto group = chorus::CreateLocalGroup(4, opts);
//   comm.AllReduce(send, recv, chorus::ReduceOp::kSum, {.timeout =
//   std::chrono::milliseconds(200)});
//
// Thread safety: values.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "chorus/store.h"

namespace chorus {

// How ranks exchange data.
//   kThread  threads of one process (CreateLocalGroup)
//   kShm     processes on one host, through a shared-memory segment
//   kTcp     hosts (not in this build yet)
//   kAuto    CreateLocalGroup: thread. Communicator::Create: thread when every rank is a thread
//            of this process, shm when every rank is on this host (same hostname and boot id),
//            otherwise an error saying that TCP is needed
enum class TransportKind : uint8_t { kAuto, kThread, kShm, kTcp };
std::string_view TransportKindName(TransportKind kind);

struct CommOptions {
  // Every wait inside a collective ends by this deadline; the call then returns
  // kDeadlineExceeded and the communicator stays failed.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  // Large buffers move in segments of at most this many bytes, so neighbours work on different
  // segments at the same time. Also the size of each staging slot, allocated once.
  size_t segment_bytes = size_t{1} << 20;
  // Staging slots per link: how many segments a sender may run ahead of its receiver.
  int pipeline_depth = 4;
  TransportKind transport = TransportKind::kAuto;
  // The algorithm every call uses unless CallOptions::algorithm says otherwise; empty lets the
  // selection table choose per call (`chorus bench --list-algos` prints it).
  std::string algorithm;

  // Communicator::Create only (CreateLocalGroup ignores them); CommOptionsFromEnvironment fills
  // them in from a launcher's variables.
  int rank = -1;
  int size = 0;
  // Where the ranks meet: a Store object, or the URL of one ("tcp://host:port",
  // "file:///path"). A given `store` wins over `store_url`.
  std::shared_ptr<Store> store;
  std::string store_url;
  // Rank 0 serves `store_url` itself (a TcpStoreServer on its port), as torchrun's MASTER_PORT.
  bool host_store = false;
  // Communicators that meet through the same store need distinct names.
  std::string name = "world";
};

struct CallOptions {
  // Overrides CommOptions::timeout for this call.
  std::optional<std::chrono::milliseconds> timeout;
  // Overrides CommOptions::segment_bytes for this call; must not exceed it.
  std::optional<size_t> segment_bytes;
  // Runs this algorithm ("ring", "oneshot", "direct", ...) instead of the selected one.
  std::string algorithm;
};

}  // namespace chorus
