// chorus/store.h: the key/value store that ranks meet through (rendezvous).
//
// Ranks publish their addresses and wait for each other's through a Store before any data
// moves. Four implementations:
//   HashStore    in-process (threads of one process, and tests)
//   FileStore    a directory on a filesystem every rank sees ("file:///shared/job42")
//   TcpStore     a client of a TcpStoreServer ("tcp://127.0.0.1:29500"), hosted by rank 0 or
//                by `chorus launch`
//   PrefixStore  namespaces another store ("comm3/" + key), one per communicator
//
//   auto server = chorus::TcpStoreServer::Start({.host = "127.0.0.1", .port = 0});
//   auto store = chorus::OpenStore("tcp://127.0.0.1:" + std::to_string((*server)->port()));
//   (*store)->Set("rank/0", "hello");
//   auto v = (*store)->Get("rank/0", std::chrono::seconds(5));
//
// Every blocking call has a deadline and its error names the store and the missing keys:
//   "store tcp://127.0.0.1:29500: waited 30 s for keys rank/2, rank/3".
// Values are arbitrary bytes held in std::string.
//
// Thread safety: every Store method may be called from several threads at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chorus/export.h"
#include "chorus/status.h"

namespace chorus {
CHORUS_API_BEGIN

// Limits every store enforces, so that code tested on one store works on all: a key is 1 to
// 4096 bytes, a value at most 64 MiB. Larger requests fail with kInvalidArgument.
inline constexpr size_t kStoreMaxKeyBytes = 4096;
inline constexpr size_t kStoreMaxValueBytes = size_t{64} << 20;

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any previous value, and wakes its waiters.
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting up to `timeout` for it to be set.
  virtual Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the integer stored at `key` (0 when absent) and returns the new value.
  // Atomic across all clients.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // Waits up to `timeout` until every key in `keys` is set.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Removes `key`; true when it existed.
  virtual Result<bool> Delete(const std::string& key) = 0;
  // Where this store lives, for messages: "tcp://127.0.0.1:29500", "file:///tmp/x", "hash://".
  virtual std::string address() const = 0;
};

// In-process store.
std::shared_ptr<Store> MakeHashStore();

// Namespaces `base`: every key is prefixed with `prefix` (which should end in '/').
std::shared_ptr<Store> MakePrefixStore(std::shared_ptr<Store> base, std::string prefix);

struct StoreOptions {
  // How long opening a store (connecting to a TcpStoreServer) may take.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(30);
  // The job's secret, proved to a TcpStoreServer on every connection (see TcpStoreServer).
  std::string secret;
};

// Opens "tcp://host:port" (a TcpStoreServer must be running there) or "file:///abs/path"
// (the directory is created when missing).
Result<std::shared_ptr<Store>> OpenStore(const std::string& url, const StoreOptions& options = {});

// The server behind TcpStore: one thread, epoll, serves any number of clients until destroyed.
class TcpStoreServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // interface to bind; loopback by default
    uint16_t port = 0;               // 0 = any free port; see port()
    // Required: clients must prove they know it (HMAC challenge-response) before their first
    // request; a client that fails, sends garbage or stalls is dropped and logged to stderr.
    std::string secret;
    // How long a client may take over its handshake before it is dropped.
    std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  };
  static Result<std::unique_ptr<TcpStoreServer>> Start(const Options& options);

  virtual ~TcpStoreServer() = default;
  virtual uint16_t port() const = 0;
  // "tcp://127.0.0.1:29500"
  virtual std::string url() const = 0;
};

CHORUS_API_END
}  // namespace chorus
