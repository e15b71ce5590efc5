// TcpStore, the client of the store behind "tcp://host:port". Wire format in tcp_protocol.h;
// the server is tcp_store_server.h's.
//
// Client. The client enforces every deadline itself: it polls its socket with the time left,
// and when the time is up it closes that connection (a late answer can then never be taken for
// the reply to a later request) and takes one last look with a non-waiting request on a fresh
// connection. That look lets a timed-out Wait name exactly the keys still missing, and lets a
// key that arrived at the last moment count as arrived. Connections live in a small pool, so
// several threads can share one TcpStore and one thread's long Get never blocks another's Set
// (a single connection behind a mutex would deadlock a rank whose threads wait on each other).
// A lone thread uses exactly one connection. Every new connection says hello and runs the
// handshake as dialer (claim "store") before its first request; a server that does not know the
// secret, or that rejects ours, fails the open at once, since retrying cannot fix a secret.
// Connecting retries until StoreOptions::connect_timeout because the server may start after its
// clients; requests that do not wait for keys also get connect_timeout to be answered. Every
// send uses MSG_NOSIGNAL: a server that vanished must produce kUnavailable, not SIGPIPE.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "net/auth.h"
#include "rendezvous/store_internal.h"
#include "rendezvous/tcp_protocol.h"
#include "rendezvous/tcp_store_wire.h"

namespace chorus {
namespace {

namespace proto = internal::tcp_store;
using internal::ErrnoText;
using internal::Handshake;
using internal::InStore;
using internal::StoreClock;
using internal::StoreDeadline;
using internal::UniqueFd;
using proto::AddrInfoList;
using proto::Exchange;
using proto::Io;
using proto::kStoreClaim;
using proto::Op;
using proto::RecvExact;
using proto::ReplyStatus;
using proto::Resolve;
using proto::RoundTrip;
using proto::SendAll;
using proto::SetNoDelay;
using proto::WaitReady;
using std::chrono::milliseconds;

constexpr milliseconds kFirstRetry(10);
constexpr milliseconds kMaxRetry(500);
constexpr milliseconds kLastLook(2000);
constexpr size_t kMaxIdleConnections = 4;
constexpr std::string_view kSameSecret = "every rank needs the same CHORUS_SECRET";

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, uint16_t port, const StoreOptions& options, internal::Secret secret)
      : host_(std::move(host)),
        port_(port),
        address_(internal::TcpUrl(host_, port_)),
        options_(options),
        secret_(std::move(secret)) {}

  // Opens the first connection, so that OpenStore reports an unreachable server.
  Status Connect() {
    auto fd = Acquire(internal::DeadlineAfter(options_.connect_timeout));
    if (!fd.ok()) return fd.status();
    Release(std::move(*fd));
    return Status::Ok();
  }

  Status Set(const std::string& key, const std::string& value) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("set", key)));
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckValue(key, value)));
    std::string frame =
        proto::FrameWriter().U8(static_cast<uint8_t>(Op::kSet)).Bytes(key).Bytes(value).Finish();
    auto x = Immediate("set of key " + key, frame, options_.connect_timeout);
    if (!x.ok()) return x.status();
    return Expect(*x, ReplyStatus::kOk, 0, "set");
  }

  Result<std::string> Get(const std::string& key, milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("get", key)));
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckTimeout("get", timeout)));
    const std::string what = "get of key " + key;
    auto x = Waiting(what, GetFrame(key, /*wait=*/true), timeout);
    if (!x.ok()) return x.status();
    if (*x) {
      CHORUS_RETURN_IF_ERROR(Expect(**x, ReplyStatus::kOk, -1, "get"));
      return std::move((*x)->payload);
    }
    // Timed out. One last look: the key may have arrived as the deadline passed.
    auto last = Immediate(what, GetFrame(key, /*wait=*/false), LastLookBudget());
    if (last.ok() && last->status == ReplyStatus::kOk) return std::move(last->payload);
    Status timed_out = internal::WaitTimedOut(address_, timeout, {key});
    if (last.ok()) return timed_out;
    return Status(timed_out.code(),
                  timed_out.message() + " (then " + last.status().message() + ")");
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("add", key)));
    std::string frame =
        proto::FrameWriter().U8(static_cast<uint8_t>(Op::kAdd)).Bytes(key).I64(delta).Finish();
    auto x = Immediate("add to key " + key, frame, options_.connect_timeout);
    if (!x.ok()) return x.status();
    CHORUS_RETURN_IF_ERROR(Expect(*x, ReplyStatus::kOk, 8, "add"));
    proto::FrameReader r(x->payload);
    return r.I64();
  }

  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKeys("wait", keys)));
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckTimeout("wait", timeout)));
    if (keys.empty()) return Status::Ok();
    proto::FrameWriter wait_frame, check_frame;
    wait_frame.U8(static_cast<uint8_t>(Op::kWait)).U32(static_cast<uint32_t>(keys.size()));
    check_frame.U8(static_cast<uint8_t>(Op::kCheck)).U32(static_cast<uint32_t>(keys.size()));
    for (const std::string& key : keys) {
      wait_frame.Bytes(key);
      check_frame.Bytes(key);
    }
    if (wait_frame.body_size() > proto::kMaxFrameBytes) {
      return InvalidArgument("store " + address_ + ": wait: " + std::to_string(keys.size()) +
                             " keys are too many for one request; wait for them in groups");
    }
    const std::string what = "wait for " + internal::NameKeys(keys);
    auto x = Waiting(what, wait_frame.Finish(), timeout);
    if (!x.ok()) return x.status();
    if (*x) return Expect(**x, ReplyStatus::kOk, 0, "wait");

    // Timed out. One last look names exactly the keys still missing.
    auto last = Immediate(what, check_frame.Finish(), LastLookBudget());
    if (!last.ok() || last->status != ReplyStatus::kOk) {
      Status timed_out = internal::WaitTimedOut(address_, timeout, keys);
      const std::string why = last.ok() ? "a garbled answer" : last.status().message();
      return Status(timed_out.code(), timed_out.message() + " (then " + why + ")");
    }
    proto::FrameReader r(last->payload);
    const uint32_t m = r.U32();
    std::vector<std::string> missing;
    for (uint32_t i = 0; i < m && r.ok(); ++i) {
      const uint32_t index = r.U32();
      if (r.ok() && index < keys.size()) missing.push_back(keys[index]);
    }
    if (!r.Done() || missing.size() != m) {
      return Internal("store " + address_ + ": wait: garbled reply to the last check");
    }
    if (missing.empty()) return Status::Ok();
    return internal::WaitTimedOut(address_, timeout, missing);
  }

  Result<bool> Delete(const std::string& key) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("delete", key)));
    std::string frame =
        proto::FrameWriter().U8(static_cast<uint8_t>(Op::kDelete)).Bytes(key).Finish();
    auto x = Immediate("delete of key " + key, frame, options_.connect_timeout);
    if (!x.ok()) return x.status();
    CHORUS_RETURN_IF_ERROR(Expect(*x, ReplyStatus::kOk, 1, "delete"));
    return x->payload[0] != 0;
  }

  std::string address() const override { return address_; }

 private:
  static std::string GetFrame(const std::string& key, bool wait) {
    return proto::FrameWriter()
        .U8(static_cast<uint8_t>(Op::kGet))
        .Bytes(key)
        .U8(wait ? 1 : 0)
        .Finish();
  }

  milliseconds LastLookBudget() const { return std::min(options_.connect_timeout, kLastLook); }

  // The reply must have `status` and, unless `payload_size` is -1, that many payload bytes.
  Status Expect(const Exchange& x, ReplyStatus status, int payload_size,
                std::string_view op) const {
    if (x.status == ReplyStatus::kError) {
      return InvalidArgument("store " + address_ + ": " + x.payload);
    }
    if (x.status != status ||
        (payload_size >= 0 && x.payload.size() != static_cast<size_t>(payload_size))) {
      return Internal("store " + address_ + ": " + std::string(op) + ": garbled reply (status " +
                      std::to_string(static_cast<int>(x.status)) + ", " +
                      std::to_string(x.payload.size()) + " bytes)");
    }
    return Status::Ok();
  }

  Status Lost(const std::string& what, const std::string& error) const {
    return Unavailable("store " + address_ + ": connection lost (" + what + ": " + error + ")");
  }

  // A request the server answers at once; `budget` covers connecting and the answer.
  Result<Exchange> Immediate(const std::string& what, const std::string& frame,
                             milliseconds budget) {
    const StoreDeadline deadline = internal::DeadlineAfter(budget);
    auto fd = Acquire(deadline);
    if (!fd.ok()) return fd.status();
    Exchange x = RoundTrip(fd->get(), frame, deadline);
    switch (x.io) {
      case Io::kOk:
        Release(std::move(*fd));
        return x;
      case Io::kTimedOut:
        return Unavailable("store " + address_ + ": no answer for " +
                           internal::FormatWaited(budget) + " (" + what + ")");
      case Io::kLost:
        break;
    }
    return Lost(what, x.error);
  }

  // A request that waits for keys. Returns nullopt when `timeout` passed; the connection is then
  // closed, since the answer may still come.
  Result<std::optional<Exchange>> Waiting(const std::string& what, const std::string& frame,
                                          milliseconds timeout) {
    const StoreDeadline deadline = internal::DeadlineAfter(timeout);
    // Connecting has its own budget: a short wait on a fresh connection must still get to ask.
    auto fd = Acquire(internal::DeadlineAfter(options_.connect_timeout));
    if (!fd.ok()) return fd.status();
    Exchange x = RoundTrip(fd->get(), frame, deadline);
    switch (x.io) {
      case Io::kOk:
        Release(std::move(*fd));
        return std::optional<Exchange>(std::move(x));
      case Io::kTimedOut:
        return std::optional<Exchange>();
      case Io::kLost:
        break;
    }
    return Lost(what, x.error);
  }

  // An idle pooled connection, or a new one.
  Result<UniqueFd> Acquire(StoreDeadline deadline) {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        UniqueFd fd = std::move(idle_.back());
        idle_.pop_back();
        return fd;
      }
    }
    return Open(deadline);
  }

  void Release(UniqueFd fd) {
    std::lock_guard lock(mu_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(fd));
  }

  // Connects and says hello, retrying (the server may not be up yet) until `deadline`.
  Result<UniqueFd> Open(StoreDeadline deadline) {
    const auto start = StoreClock::now();
    std::string error = "no address to try";
    milliseconds pause = kFirstRetry;
    while (true) {
      AddrInfoList addrs = Resolve(host_, port_, /*passive=*/false, &error);
      for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
        UniqueFd fd = ConnectTo(ai, deadline, &error);
        if (!fd) continue;
        bool fatal = false;
        if (Hello(fd.get(), deadline, &error, &fatal)) return fd;
        if (fatal) return FailedPrecondition("store " + address_ + ": " + error);
      }
      const auto left = deadline - StoreClock::now();
      if (left <= StoreClock::duration::zero()) {
        const auto tried = std::chrono::duration_cast<milliseconds>(StoreClock::now() - start);
        return Unavailable("store " + address_ + ": cannot connect (tried for " +
                           internal::FormatWaited(tried) + "; last error: " + error + ")");
      }
      std::this_thread::sleep_for(std::min<StoreClock::duration>(pause, left));
      pause = std::min(pause * 2, kMaxRetry);
    }
  }

  static UniqueFd ConnectTo(const addrinfo* ai, StoreDeadline deadline, std::string* error) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      *error = "socket: " + ErrnoText(errno);
      return {};
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        *error = ErrnoText(errno);
        return {};
      }
      const Io io = WaitReady(fd.get(), POLLOUT, deadline, error);
      if (io == Io::kTimedOut) *error = "connect timed out";
      if (io != Io::kOk) return {};
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        *error = ErrnoText(err);
        return {};
      }
    }
    SetNoDelay(fd.get());
    return fd;
  }

  // Stages 1 and 2 of the protocol. False with *fatal when retrying cannot help (a different
  // service or protocol version listens there, or the secrets differ).
  bool Hello(int fd, StoreDeadline deadline, std::string* error, bool* fatal) const {
    const std::string hello = proto::Hello(proto::kMagic, proto::kVersion, 0);
    char reply[proto::kHelloBytes];
    Io io = SendAll(fd, hello, deadline, error);
    if (io == Io::kOk) io = RecvExact(fd, reply, sizeof(reply), deadline, error);
    if (io == Io::kTimedOut) *error = "no answer to the hello";
    if (io != Io::kOk) return false;
    if (proto::LoadU32(reply) != proto::kMagic) {
      *fatal = true;
      *error = "the server is not a chorus store server (wrong magic in its hello)";
      return false;
    }
    const uint16_t version = proto::LoadU16(reply + 4);
    const auto status = static_cast<proto::HelloStatus>(proto::LoadU16(reply + 6));
    if (status != proto::HelloStatus::kAccepted || version != proto::kVersion) {
      *fatal = true;
      *error = "the server speaks protocol version " + std::to_string(version) +
               ", this client version " + std::to_string(proto::kVersion);
      return false;
    }
    Handshake handshake(secret_, Handshake::Role::kDialer, std::string(kStoreClaim));
    const Status s = internal::RunHandshake(fd, handshake, deadline);
    if (s.ok()) return true;
    if (s.code() == StatusCode::kDeadlineExceeded) {
      *error = "no answer to the handshake";
      return false;
    }
    *fatal = true;
    if (s.code() == StatusCode::kFailedPrecondition) {
      // The server's proof did not verify: it holds a different secret.
      *error = "the server does not know this job's secret (" + std::string(kSameSecret) + ")";
    } else if (s.message().find("closed the connection") != std::string::npos) {
      // It heard our proof and hung up: our secret is not its secret.
      *error = "the server rejected this client's secret (" + std::string(kSameSecret) + ")";
    } else {
      *error = s.message();
    }
    return false;
  }

  const std::string host_;
  const uint16_t port_;
  const std::string address_;
  const StoreOptions options_;
  const internal::Secret secret_;
  std::mutex mu_;
  std::vector<UniqueFd> idle_;  // guarded by mu_
};

}  // namespace

namespace internal {

Result<std::shared_ptr<Store>> OpenTcpStore(const std::string& host, uint16_t port,
                                            const StoreOptions& options) {
  const std::string where = "store " + TcpUrl(host, port);
  if (options.secret.empty()) {
    return InvalidArgument(where +
                           ": StoreOptions::secret is empty: set it to the job's secret "
                           "(CHORUS_SECRET; " +
                           std::string(kSameSecret) + ")");
  }
  auto secret = Secret::FromText(options.secret, "StoreOptions::secret");
  if (!secret.ok()) return InvalidArgument(where + ": " + secret.status().message());
  auto store = std::make_shared<TcpStore>(host, port, options, std::move(secret).value());
  CHORUS_RETURN_IF_ERROR(store->Connect());
  return std::shared_ptr<Store>(std::move(store));
}

}  // namespace internal
}  // namespace chorus
