// chorus/options.h: aggregate options for communicators and for single calls.
//
// Options are plain aggregates with defaults; set what you need with designated initialisers:
//
//   chorus::CommOptions opts{.timeout = std::chrono::seconds(5)};
//   auto group = chorus::CreateLocalGroup(4, opts);
//   comm.AllReduce(send, recv, chorus::ReduceOp::kSum, {.timeout = std::chrono::milliseconds(200)});
//
// Thread safety: values.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace chorus {

// How ranks exchange data. kThread: ranks are threads of one process (CreateLocalGroup).
enum class TransportKind : uint8_t { kAuto, kThread };

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
};

struct CallOptions {
  // Overrides CommOptions::timeout for this call.
  std::optional<std::chrono::milliseconds> timeout;
  // Overrides CommOptions::segment_bytes for this call; must not exceed it.
  std::optional<size_t> segment_bytes;
};

}  // namespace chorus
