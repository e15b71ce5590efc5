// StoreServer, the server behind TcpStoreServer ("tcp://host:port"): its limits and its state.
// Wire format in tcp_protocol.h. The connections, their stages and the event loop are
// tcp_store_server.cpp's; the requests against the key-value table, and the waiters parked on
// its keys, tcp_store_requests.cpp's.
//
// Server. One background thread runs a level-triggered epoll loop over non-blocking sockets:
// the listening socket, an eventfd that the destructor uses to wake the loop, and one entry per
// client. Each connection goes through stages (hello, the handshake of net/auth.h, then
// requests) and keeps an input and an output buffer. A request that must wait for keys (Get,
// Wait) is parked: the connection registers under the first key it still misses, and the Set or
// Add of that key re-examines it, answering or re-registering under the next missing key. So
// nobody polls, and a Set costs nothing for waiters of other keys. While a request is parked, or
// while a reply has not been fully written, the connection processes no further requests and
// reads at most 64 KiB ahead, which bounds the memory any one client can pin. Every length is
// checked against its limit before anything is allocated for it, and a connection that breaks
// the protocol is closed without disturbing the others. Connections are closed only between
// batches of events, so a handler never holds a dangling reference.
//
// Authentication. The handshake is the same incremental state machine the blocking client runs,
// fed from the input buffer, so a client reaches the request parser only after proving that it
// knows the secret. Hello and handshake together must finish within handshake_timeout. The
// connections still in them are queued in accept order, which with one timeout for all is
// deadline order, so epoll_wait sleeps at most until the first deadline and expiry looks only at
// the front. Every connection dropped for breaking the protocol (garbage, a failed proof, a
// stall) gets one line on stderr with its address and the reason.
//
// Thread safety: the loop thread alone touches the connections and the table; the destructor
// (any thread) stops and joins it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/log_limit.h"
#include "net/auth.h"
#include "rendezvous/store_internal.h"
#include "rendezvous/tcp_protocol.h"

namespace chorus::internal::tcp_store {

inline constexpr uint64_t kListenId = 0;
inline constexpr uint64_t kWakeId = 1;
inline constexpr size_t kReadChunk = 64 * 1024;
inline constexpr size_t kReadPerEvent = 4 * kReadChunk;  // then give the other clients a turn
inline constexpr size_t kReadAhead = 64 * 1024;          // input buffered while requests cannot run
inline constexpr size_t kKeepCapacity = 1 << 20;         // larger idle buffers are given back
inline constexpr std::chrono::milliseconds kAcceptPause(100);  // after running out of descriptors
// Connections still in their hello or handshake share this many places; a newer one pushes out
// the one that has been quiet longest, after a last look at what it sent. A client says hello
// and answers its challenge at once, so idle and slow strangers never keep a client out.
inline constexpr size_t kMaxStrangers = 128;
// Authenticated clients (they know the job's secret) beyond this are turned away, with a log
// line: a job's ranks hold a few connections each.
inline constexpr size_t kMaxClients = 16384;

class StoreServer final : public TcpStoreServer {
 public:
  static Result<std::unique_ptr<TcpStoreServer>> Start(const Options& options);

  StoreServer(std::string host, uint16_t port, UniqueFd listen_fd, internal::Secret secret,
              std::chrono::milliseconds handshake_timeout)
      : host_(std::move(host)),
        port_(port),
        listen_(std::move(listen_fd)),
        secret_(std::move(secret)),
        handshake_timeout_(handshake_timeout) {}

  ~StoreServer() override {
    if (thread_.joinable()) {
      stop_.store(true, std::memory_order_release);
      const uint64_t one = 1;
      // The eventfd counter cannot overflow from one write; nothing useful to do on failure.
      [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof(one));
      thread_.join();
    }
    // Members now close every client socket (they see EOF at once), the listener and epoll.
  }

  uint16_t port() const override { return port_; }
  std::string url() const override { return internal::TcpUrl(host_, port_); }

 private:
  enum class Stage { kHello, kAuth, kRequests };

  struct Parked {
    Op op;
    std::vector<std::string> keys;
    std::string waiting_on;  // the key this connection is registered under in waiters_
  };

  struct Connection {
    uint64_t id = 0;
    UniqueFd fd;
    Stage stage = Stage::kHello;
    std::string peer;               // "127.0.0.1:40312", for the log
    std::optional<Handshake> auth;  // during Stage::kAuth
    StoreClock::time_point handshake_deadline;
    StoreClock::time_point last_heard;  // when it last sent something (or was accepted)
    std::string in;                     // received bytes; in[in_pos..] not yet consumed
    size_t in_pos = 0;
    std::string out;  // reply bytes; out[out_pos..] not yet sent
    size_t out_pos = 0;
    std::optional<Parked> parked;
    bool close_after_flush = false;
    bool peer_closed = false;
    bool dead = false;  // closed at the end of the current batch of events
    uint32_t interest = 0;
  };

  Status Init();
  void Run();
  void Accept();
  void OnEvent(Connection& c, uint32_t events);
  void ReadFrom(Connection& c);
  void Process(Connection& c);
  bool HandleHello(Connection& c);
  bool HandleAuth(Connection& c);
  bool HandleRequest(Connection& c, std::string_view body);
  void Reply(Connection& c, ReplyStatus status, std::string_view payload);
  void Flush(Connection& c);
  void UpdateInterest(Connection& c);
  bool WantsInput(const Connection& c) const;
  void Kill(Connection& c);
  void Drop(Connection& c, std::string_view reason);
  // Makes room for a new stranger: the one quiet longest goes, unless a last read shows it busy.
  void PushOutStranger();
  size_t Strangers() const;
  void ExpireHandshakes();
  int WaitTimeoutMs() const;
  void Reap();
  void DrainRunnable();
  const std::string* FirstMissing(const std::vector<std::string>& keys) const;
  void WaitOn(Connection& c, const std::string& key);
  void KeyChanged(const std::string& key);

  const std::string host_;
  const uint16_t port_;
  UniqueFd listen_;
  UniqueFd epoll_;
  UniqueFd wake_;
  std::atomic<bool> stop_{false};
  const internal::Secret secret_;
  const std::chrono::milliseconds handshake_timeout_;

  // Owned by the loop thread.
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;
  std::unordered_map<std::string, std::string> values_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;
  std::deque<uint64_t> runnable_;  // unparked connections that may have buffered requests
  std::vector<uint64_t> doomed_;
  // (deadline, id) of connections still in hello or handshake, in accept order, which is
  // deadline order; entries of connections that have moved on are skipped when they surface.
  std::deque<std::pair<StoreClock::time_point, uint64_t>> handshakes_;
  std::optional<StoreClock::time_point> accept_paused_until_;
  uint64_t next_id_ = kWakeId + 1;
  size_t clients_ = 0;  // connections past their handshake
  internal::LogLimiter log_{"chorus store"};
  // Where every connection's reads land first: a connection's buffer grows by what arrived.
  std::unique_ptr<char[]> read_buffer_ = std::make_unique<char[]>(kReadChunk);

  std::thread thread_;  // last: started when everything it touches exists
};

}  // namespace chorus::internal::tcp_store
