// Frame protection between TCP ranks (CommOptions::wire): every mode moves exact data, and a
// proxy on the path between two ranks that changes a payload byte, or drops a frame and
// renumbers the ones after it, goes unnoticed under kAuthenticate (what the mode does not
// promise) and fails the call on both ranks under kIntegrity and kEncrypt.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "chorus/chorus.h"
#include "support/group.h"
#include "support/matrix.h"

namespace chorus {
namespace {

using ::testing::HasSubstr;
using testing::RankExit;

std::string Join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& line : lines) s += line + "\n";
  return s;
}

class WireModes : public ::testing::TestWithParam<WireMode> {};

TEST_P(WireModes, MoveExactData) {
  setenv("CHORUS_TEST_SCALE", "small", 1);
  for (int p : {2, 3}) {
    const auto reports = testing::RunGroup(
        TransportKind::kTcp, p,
        [p](Communicator& comm) {
          std::string report;
          for (const auto& [kind, algorithm] :
               std::vector<std::pair<CollectiveKind, std::string>>{
                   {CollectiveKind::kAllReduce, "ring"},
                   {CollectiveKind::kAllReduce, "oneshot"},
                   {CollectiveKind::kAllReduce, "rd"},
                   {CollectiveKind::kReduceScatter, "ring"},
                   {CollectiveKind::kAllGather, "bruck"}}) {
            for (auto count : {testing::CountCase::kOne, testing::CountCase::kTinySegments,
                               testing::CountCase::kBig}) {
              report += Join(testing::RunMatrixCase(comm, {kind, p, count, algorithm}));
            }
          }
          return report;
        },
        {.timeout = std::chrono::seconds(60), .wire = GetParam()});
    for (size_t r = 0; r < reports.size(); ++r) {
      EXPECT_EQ(reports[r], "") << "p " << p << " rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, WireModes,
                         ::testing::Values(WireMode::kAuthenticate, WireMode::kIntegrity,
                                           WireMode::kEncrypt),
                         [](const auto& param_info) {
                           return std::string(WireModeName(param_info.param));
                         });

// ------------------------------------------------------------------ the proxy

// A Store that hands rank 0 the proxy's address in place of rank 1's.
class RedirectingStore final : public Store {
 public:
  explicit RedirectingStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}
  Status Set(const std::string& key, const std::string& value) override {
    return base_->Set(key, value);
  }
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    const std::string wanted = "/tcp/addr/1";
    if (key.size() > wanted.size() && key.ends_with(wanted)) {
      auto real = base_->Get(key, timeout);
      if (!real.ok()) return real;
      CHORUS_RETURN_IF_ERROR(base_->Set("proxy/target", *real));
      return base_->Get("proxy/addr", timeout);
    }
    return base_->Get(key, timeout);
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    return base_->Add(key, delta);
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return base_->Wait(keys, timeout);
  }
  Result<bool> Delete(const std::string& key) override { return base_->Delete(key); }
  std::string address() const override { return base_->address(); }

 private:
  std::shared_ptr<Store> base_;
};

enum class Attack { kFlip, kDropAndRenumber };

uint64_t LoadU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}
void StoreU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}

// Forwards rank 0's connection to rank 1 and back. In the direction 0 -> 1 it follows the
// stream (the handshake's two messages, then 64-byte frame headers, payloads and, when the
// link is protected, 16-byte tags) and attacks the third data frame.
void RunProxy(const std::shared_ptr<Store>& store, Attack attack, bool sealed) {
  internal::UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return;
  listen(listener.get(), 4);
  socklen_t len = sizeof(a);
  getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len);
  store->Set("proxy/addr", "127.0.0.1:" + std::to_string(ntohs(a.sin_port))).IgnoreError();
  auto target = store->Get("proxy/target", std::chrono::seconds(30));
  if (!target.ok()) return;
  internal::UniqueFd from0(accept(listener.get(), nullptr, nullptr));
  const size_t colon = target->rfind(':');
  sockaddr_in b{};
  b.sin_family = AF_INET;
  b.sin_port = htons(static_cast<uint16_t>(std::stoi(target->substr(colon + 1))));
  inet_pton(AF_INET, target->substr(0, colon).c_str(), &b.sin_addr);
  internal::UniqueFd to1(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (connect(to1.get(), reinterpret_cast<sockaddr*>(&b), sizeof(b)) != 0) return;

  // Direction 0 -> 1, parsed. Units: the handshake (message 1, then message 3), then frames.
  std::vector<uint8_t> pending;  // bytes of the current unit not yet forwarded
  int stage = 0;                 // 0 message 1, 1 message 3, 2 frame header, 3 frame body
  size_t unit = 8;               // bytes of the current unit (message 1: its header first)
  uint64_t data_frames = 0;
  uint64_t dropped = 0;  // frames left out so far: later sequence numbers move down by this
  bool skipping = false;
  std::vector<uint8_t> header(64);
  auto forward = [&](const uint8_t* p, size_t n) {
    if (!skipping) send(to1.get(), p, n, MSG_NOSIGNAL);
  };
  auto consume = [&](const uint8_t* data, size_t n) {
    size_t i = 0;
    while (i < n) {
      const size_t take = std::min(n - i, unit - pending.size());
      pending.insert(pending.end(), data + i, data + i + take);
      i += take;
      if (pending.size() < unit) break;
      switch (stage) {
        case 0:
          if (unit == 8) {  // message 1's header: its claim length follows the nonce
            unit = 8 + 32 + ((pending[6] << 8) | pending[7]);
            continue;
          }
          forward(pending.data(), pending.size());
          stage = 1;
          unit = 32;
          break;
        case 1:
          forward(pending.data(), pending.size());
          stage = 2;
          unit = 64;
          break;
        case 2: {
          std::memcpy(header.data(), pending.data(), 64);
          const uint16_t type = static_cast<uint16_t>((header[6] << 8) | header[7]);
          const uint64_t length = LoadU64(&header[48]);
          StoreU64(&header[16], LoadU64(&header[16]) - dropped);
          skipping = false;
          if (type == 1 && ++data_frames == 3 && length > 0) {
            if (attack == Attack::kDropAndRenumber) {
              skipping = true;
              ++dropped;
            }
          }
          forward(header.data(), 64);
          stage = 3;
          unit = static_cast<size_t>(length) + (sealed ? 16 : 0);
          if (unit == 0) {
            stage = 2;
            unit = 64;
          }
          break;
        }
        case 3:
          if (attack == Attack::kFlip && data_frames == 3 && !pending.empty()) {
            pending[0] ^= 0x01;
          }
          forward(pending.data(), pending.size());
          skipping = false;
          stage = 2;
          unit = 64;
          break;
      }
      pending.clear();
    }
  };
  pollfd fds[2] = {{from0.get(), POLLIN, 0}, {to1.get(), POLLIN, 0}};
  uint8_t buf[65536];
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < give_up) {
    if (poll(fds, 2, 200) <= 0) continue;
    if (fds[0].revents != 0) {
      const ssize_t n = recv(from0.get(), buf, sizeof(buf), 0);
      if (n <= 0) return;
      consume(buf, static_cast<size_t>(n));
    }
    if (fds[1].revents != 0) {
      const ssize_t n = recv(to1.get(), buf, sizeof(buf), 0);
      if (n <= 0) return;
      send(from0.get(), buf, static_cast<size_t>(n), MSG_NOSIGNAL);
    }
  }
}

struct AttackCase {
  WireMode wire;
  Attack attack;
};

class Tampering : public ::testing::TestWithParam<AttackCase> {};

// Two ranks all-reduce 64 Ki floats ten times through the proxy; every call's result is checked.
TEST_P(Tampering, IsCaughtUnderIntegrityAndEncryptOnBothRanks) {
  const AttackCase c = GetParam();
  const testing::TempDir dir;
  const auto exits = testing::ForkRanks(3, [&](int who) -> std::string {
    auto base = OpenStore(dir.url());
    if (!base.ok()) return base.status().ToString();
    auto store = std::make_shared<RedirectingStore>(*base);
    if (who == 2) {
      RunProxy(*base, c.attack, c.wire != WireMode::kAuthenticate);
      return "";
    }
    CommOptions o = testing::GroupOptions(TransportKind::kTcp, who, 2, "");
    o.store = who == 0 ? std::shared_ptr<Store>(store) : *base;
    o.wire = c.wire;
    o.timeout = std::chrono::seconds(10);
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return "Create: " + comm.status().ToString();
    int wrong = 0;
    for (int i = 0; i < 10; ++i) {
      std::vector<float> v(1 << 16, float(who + 1));
      const Status s = comm->AllReduce(std::span<float>(v), ReduceOp::kSum, {.algorithm = "ring"});
      if (!s.ok()) return "failed: " + s.ToString();
      for (float x : v) wrong += x != 3.0f ? 1 : 0;
    }
    return "ok, wrong elements: " + std::to_string(wrong);
  });
  const std::string r0 = exits[0].report;
  const std::string r1 = exits[1].report;
  if (c.wire == WireMode::kAuthenticate) {
    if (c.attack == Attack::kFlip) {
      // What kAuthenticate does not promise: the changed byte becomes a wrong sum, silently.
      EXPECT_THAT(r0 + r1, HasSubstr("ok, wrong elements: ")) << r0 << "\n" << r1;
      EXPECT_THAT(r0 + r1, ::testing::Not(HasSubstr("wrong elements: 0\n"))) << r0 << r1;
    }
    return;
  }
  for (const std::string& r : {r0, r1}) {
    EXPECT_THAT(r, HasSubstr("failed: UNAVAILABLE")) << r;
    EXPECT_THAT(r, HasSubstr("fails its integrity check")) << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Attacks, Tampering,
    ::testing::Values(AttackCase{WireMode::kAuthenticate, Attack::kFlip},
                      AttackCase{WireMode::kIntegrity, Attack::kFlip},
                      AttackCase{WireMode::kIntegrity, Attack::kDropAndRenumber},
                      AttackCase{WireMode::kEncrypt, Attack::kFlip},
                      AttackCase{WireMode::kEncrypt, Attack::kDropAndRenumber}),
    [](const auto& param_info) {
      return std::string(WireModeName(param_info.param.wire)) +
             (param_info.param.attack == Attack::kFlip ? "_flip" : "_drop");
    });

}  // namespace
}  // namespace chorus
