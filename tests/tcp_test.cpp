// Ranks as processes over the TCP transport on loopback: the collective matrix, setup, a rank
// killed mid-collective, and strangers that connect to a running job's listening socket.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "net/auth.h"
#include "support/fork_checks.h"
#include "support/matrix.h"
#include "support/raw_socket.h"
#include "support/spawn.h"
#include "support/temp_dir.h"
#include "transport/tcp/tcp_transport_internal.h"

namespace chorus {
namespace {

using testing::ExpectAllOk;
using testing::ForkRanks;
using testing::MatrixParam;
using testing::RankExit;
using testing::TempDir;
namespace fs = std::filesystem;

constexpr char kSecret[] = "tcp-test-secret";

CommOptions TcpOptions(int rank, int size, const std::string& store_url) {
  CommOptions o;
  o.rank = rank;
  o.size = size;
  o.store_url = store_url;
  o.transport = TransportKind::kTcp;
  o.secret = kSecret;
  o.timeout = std::chrono::seconds(60);
  o.wait = testing::TestWaitMode();
  o.slot_stores = testing::TestSlotStores();
  return o;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& line : lines) s += line + "\n";
  return s;
}

// One communicator per algorithm and rank count runs every count case (in the sanitizer builds
// those of testing::SanitizersRun): connecting costs more than a small case. Arithmetic does not
// depend on the transport (the thread and shm matrices cover every dtype and op at full scale),
// so this matrix runs the reduced dtype/op set and spends its time on what TCP adds: framing,
// credits, partial reads and writes. Its rank counts: one (nothing sent), two, an odd three, a
// power of two and eight (the thread and shm matrices add five and seven).
struct TcpCase {
  CollectiveKind kind;
  std::string algorithm;
  int ranks;
};

std::vector<TcpCase> TcpCases() {
  std::vector<TcpCase> cases;
  for (const internal::AlgorithmInfo& a : internal::Algorithms()) {
    for (int p : {1, 2, 3, 4, 8}) cases.push_back({a.kind, std::string(a.name), p});
  }
  return cases;
}

class TcpMatrix : public ::testing::TestWithParam<TcpCase> {};

TEST_P(TcpMatrix, ExactResults) {
  const TcpCase c = GetParam();
  const bool sanitized = testing::SmallScale();  // before this suite asks for the small scale
  setenv("CHORUS_TEST_SCALE", "small", 1);
  const TempDir dir;
  const auto exits = ForkRanks(c.ranks, [&](int rank) -> std::string {
    CommOptions o = TcpOptions(rank, c.ranks, dir.url());
    // The sanitizers' segment (small-scale counts run in every build; the segment follows the
    // build's scale, so the normal build keeps the default one).
    if (sanitized) o.segment_bytes = CommOptions{}.segment_bytes / testing::kSmallScaleDivisor;
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    if (comm->transport() != TransportKind::kTcp) return "transport is not tcp";
    std::string report;
    for (int count = 0; count < testing::kNumCountCases; ++count) {
      const MatrixParam m{c.kind, c.ranks, static_cast<testing::CountCase>(count), c.algorithm};
      if (sanitized && !testing::SanitizersRun(m.count_case)) continue;
      report += Join(testing::RunMatrixCase(*comm, m));
    }
    return report;
  });
  ExpectAllOk(exits);
}

INSTANTIATE_TEST_SUITE_P(Matrix, TcpMatrix, ::testing::ValuesIn(TcpCases()),
                         [](const auto& param_info) {
                           return std::string(CollectiveKindName(param_info.param.kind)) + "_" +
                                  param_info.param.algorithm + "_p" +
                                  std::to_string(param_info.param.ranks);
                         });

// Ranks on several "hosts": each forked rank gets its own hostname in a new UTS namespace (root
// only), so Create sees distinct hosts and builds shm within a host and TCP across hosts.
struct HostsCase {
  std::vector<int> per_host;  // ranks on each host, hosts in rank order
};

void BecomeHost(int host) {
  if (unshare(CLONE_NEWUTS) != 0) std::abort();
  const std::string name = "chorus-fake-host-" + std::to_string(host);
  if (sethostname(name.c_str(), name.size()) != 0) std::abort();
}

class TcpHosts : public ::testing::TestWithParam<HostsCase> {};

TEST_P(TcpHosts, EveryAlgorithmIsExact) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a UTS namespace per fake host";
  const bool sanitized = testing::SmallScale();  // before this suite asks for the small scale
  setenv("CHORUS_TEST_SCALE", "small", 1);
  const std::vector<int> per_host = GetParam().per_host;
  std::vector<int> host_of;
  for (size_t h = 0; h < per_host.size(); ++h) host_of.insert(host_of.end(), per_host[h], h);
  const int p = static_cast<int>(host_of.size());
  const TempDir dir;
  const auto exits = ForkRanks(p, [&](int rank) -> std::string {
    BecomeHost(host_of[static_cast<size_t>(rank)]);
    CommOptions o = TcpOptions(rank, p, dir.url());
    o.transport = TransportKind::kAuto;
    o.listen = "127.0.0.1";
    if (sanitized) o.segment_bytes = CommOptions{}.segment_bytes / testing::kSmallScaleDivisor;
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    if (comm->transport() != TransportKind::kTcp) return "kAuto did not pick tcp across hosts";
    std::string report;
    for (const char* algorithm : {"hierarchical", "ring", ""}) {
      for (int count = 0; count < testing::kNumCountCases; ++count) {
        const MatrixParam m{CollectiveKind::kAllReduce, p, static_cast<testing::CountCase>(count),
                            algorithm};
        if (sanitized && !testing::SanitizersRun(m.count_case)) continue;
        report += Join(testing::RunMatrixCase(*comm, m));
      }
    }
    for (CollectiveKind kind : {CollectiveKind::kReduceScatter, CollectiveKind::kAllGather}) {
      const MatrixParam m{kind, p, testing::CountCase::kTinySegments, "ring"};
      report += Join(testing::RunMatrixCase(*comm, m));
    }
    // Every other algorithm too, at an uneven count: ranks that share memory and ranks that do
    // not, in one communicator.
    for (const internal::AlgorithmInfo& a : internal::Algorithms()) {
      if (a.kind == CollectiveKind::kAllReduce) continue;
      const MatrixParam m{a.kind, p, testing::CountCase::kSeven, std::string(a.name)};
      report += Join(testing::RunMatrixCase(*comm, m));
    }
    return report;
  });
  ExpectAllOk(exits);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TcpHosts,
                         ::testing::Values(HostsCase{{2, 2}}, HostsCase{{2, 2, 2}},
                                           HostsCase{{3, 3}}, HostsCase{{2, 1}},
                                           HostsCase{{1, 1, 1}}),
                         [](const auto& param_info) {
                           std::string name = "hosts";
                           for (int n : param_info.param.per_host) name += "_" + std::to_string(n);
                           return name;
                         });

TEST(TcpHostsFailure, KilledRankOnOneHostIsNamedOnEveryHost) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a UTS namespace per fake host";
  const TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  const auto exits = ForkRanks(4, [&](int rank) -> std::string {
    BecomeHost(rank / 2);
    CommOptions o = TcpOptions(rank, 4, dir.url());
    o.transport = TransportKind::kAuto;
    o.listen = "127.0.0.1";
    o.timeout = std::chrono::seconds(20);
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    std::vector<float> v(1 << 16, 1.0f);
    for (int i = 0;; ++i) {
      if (rank == 3 && i == 5) raise(SIGKILL);
      const Status s = comm->AllReduce(std::span<float>(v), ReduceOp::kMax);
      if (s.ok()) continue;
      if (s.code() != StatusCode::kUnavailable && s.code() != StatusCode::kAborted) {
        return "wrong code: " + s.ToString();
      }
      if (s.message().find("rank 3") == std::string::npos) return "no rank 3 in: " + s.ToString();
      return "";
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r : {0, 1, 2}) EXPECT_TRUE(exits[r].ok()) << "rank " << r << ": " << exits[r].report;
  EXPECT_LT(seconds, 20.0);
}

// Two TCP transports of one process, ranks 0 and 1 (depth 2, 64-byte slots).
std::vector<std::unique_ptr<internal::Transport>> ConnectPair(const std::string& store_url) {
  auto store = OpenStore(store_url);
  EXPECT_TRUE(store.ok()) << store.status();
  auto secret = internal::Secret::FromText(kSecret, "test");
  EXPECT_TRUE(secret.ok()) << secret.status();
  auto connect = [&](int rank) {
    const internal::ConnectConfig c{rank, 2, 64, 2,
                                    internal::Clock::now() + std::chrono::seconds(60)};
    return internal::ConnectTcp(**store, internal::TcpConfig{c, "127.0.0.1", *secret});
  };
  auto one = std::async(std::launch::async, connect, 1);
  auto zero = connect(0);
  auto first = one.get();
  EXPECT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE(first.ok()) << first.status();
  std::vector<std::unique_ptr<internal::Transport>> pair;
  if (zero.ok() && first.ok()) {
    pair.push_back(std::move(zero).value());
    pair.push_back(std::move(first).value());
  }
  return pair;
}

// Polls `ready` until it holds; false after a minute (a hang, not a verdict on speed).
template <typename Ready>
bool Eventually(Ready&& ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// A rank that sent its last messages of a job and exited left them in its peer's socket, unread
// while the peer's slots are full. A send to it then fails (it hung up): the peer still reads
// every message, and only then finds the rank gone. (The clean-clone run of 222ff97: a
// gather-v root whose link to a finished rank was paused lost its data when a census probe to
// that rank failed.)
TEST(TcpLink, WhatAPeerSentBeforeItHungUpIsReadAfterASendToItFails) {
  const TempDir dir;
  auto pair = ConnectPair(dir.url());
  ASSERT_EQ(pair.size(), 2u);
  internal::Transport& zero = *pair[0];
  constexpr int kMessages = 8;  // 2 in rank 0's slots, the rest in its socket
  constexpr size_t kBytes = 64;
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(Eventually([&] { return pair[1]->TryCredit(0); })) << "message " << i;
    std::vector<unsigned char> bytes(kBytes, static_cast<unsigned char>(i + 1));
    pair[1]->Post(0, {bytes.data(), kBytes, internal::CallTag{.call_index = uint64_t(i)}});
  }
  ASSERT_TRUE(Eventually([&] { return pair[1]->Drained(0); }));
  pair[1].reset();  // rank 1 exits
  // Rank 0 sends to it until a send fails: the first may still go out (the closed socket answers
  // it with a reset).
  auto& tcp = dynamic_cast<internal::tcp::TcpTransport&>(zero);
  const unsigned char ping[4] = {1, 2, 3, 4};
  ASSERT_TRUE(Eventually([&] {
    if (tcp.PeerHungUp(1)) return true;
    if (zero.TryCredit(1)) zero.Post(1, {ping, sizeof ping, internal::CallTag{}});
    return false;
  }));
  for (int i = 0; i < kMessages; ++i) {
    internal::Message m;
    ASSERT_TRUE(Eventually([&] { return zero.TryPeek(1, &m, nullptr) || !zero.PeerAlive(1); }));
    ASSERT_TRUE(zero.PeerAlive(1) || zero.TryPeek(1, &m, nullptr))
        << "message " << i << " lost: " << zero.DescribeDeath(1);
    EXPECT_EQ(m.bytes, kBytes);
    EXPECT_EQ(m.tag.call_index, uint64_t(i));
    const auto* data = static_cast<const unsigned char*>(m.data);
    EXPECT_EQ(std::count(data, data + m.bytes, static_cast<unsigned char>(i + 1)), long(kBytes))
        << "message " << i;
    zero.Release(1);
  }
  ASSERT_TRUE(Eventually([&] { return !zero.PeerAlive(1); }));
  EXPECT_THAT(zero.DescribeDeath(1), ::testing::HasSubstr("rank 1"));
  // Once the link is dead, what is posted to it is no longer taken: the credits run out, and a
  // wait for one finds the rank dead instead of sending into nothing.
  int posted = 0;
  while (zero.TryCredit(1) && posted < 100) {
    zero.Post(1, {ping, sizeof ping, internal::CallTag{}});
    ++posted;
  }
  EXPECT_FALSE(zero.TryCredit(1)) << posted << " posts after its death were all taken";
  EXPECT_LE(posted, 2);
}

TEST(TcpCreate, NoSecretIsAClearError) {
  const TempDir dir;
  const auto exits = ForkRanks(2, [&](int rank) -> std::string {
    CommOptions o = TcpOptions(rank, 2, dir.url());
    o.secret.clear();
    o.timeout = std::chrono::seconds(5);
    auto comm = Communicator::Create(o);
    if (comm.ok()) return "Create succeeded without a secret";
    if (comm.status().code() != StatusCode::kInvalidArgument) return comm.status().ToString();
    return comm.status().message().find("secret") == std::string::npos ? comm.status().ToString()
                                                                       : "";
  });
  ExpectAllOk(exits);
}

TEST(TcpCreate, RanksWithDifferentSecretsNeverExchangeData) {
  const TempDir dir;
  const auto exits = ForkRanks(2, [&](int rank) -> std::string {
    CommOptions o = TcpOptions(rank, 2, dir.url());
    if (rank == 1) o.secret = "another-secret";
    o.timeout = std::chrono::seconds(3);
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    std::vector<int32_t> v(8, rank + 1);
    const Status s = comm->AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
    if (s.ok()) return "an all-reduce across different secrets succeeded";
    if (v != std::vector<int32_t>(8, rank + 1)) return "the buffer changed";
    return "";
  });
  ExpectAllOk(exits);
}

TEST(TcpFailure, KilledRankIsNamedByEverySurvivorWithinTheTimeout) {
  const TempDir dir;
  // Found from the closed connection, not the deadline.
  testing::RunKilledRankTrial({.options = [&](int rank) { return TcpOptions(rank, 4, dir.url()); },
                               .elements = 1 << 16,
                               .aborted_too = true});
}

// ---------------------------------------------------------------- strangers

// A raw connection to "ip:port".
internal::UniqueFd Dial(const std::string& address) {
  const size_t colon = address.rfind(':');
  return testing::RawConnect(address.substr(0, colon),
                             static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
}

// True when the job closes the connection within `limit` having sent nothing.
bool DroppedSilently(int fd, std::chrono::seconds limit) {
  std::string got;
  return testing::ClosedByPeer(fd, limit, &got) && got.empty();
}

// Rank 2 is a stranger that attacks rank 1's listening socket while ranks 0 and 1 run
// all-reduces; the job must finish with exact results and the stranger must learn nothing.
TEST(TcpSecurity, StrangersAreDroppedWhileTheJobRunsOn) {
  const TempDir dir;
  // The job's timeout, which is also its handshake timeout: 3 s, longer where a sanitizer slows
  // the first call's handshakes (under TSan call #0 once took more than 3 s beside the strangers).
  const std::chrono::seconds timeout(3 * testing::SanitizerSlowdown());
  const auto exits = ForkRanks(3, [&](int rank) -> std::string {
    auto store = OpenStore(dir.url());
    if (!store.ok()) return store.status().ToString();
    if (rank == 2) {
      auto address = (*store)->Get("chorus/world/1/tcp/addr/1", std::chrono::seconds(30));
      if (!address.ok()) return address.status().ToString();
      if (!(*store)->Get("job/running", std::chrono::seconds(30)).ok()) return "job never ran";
      std::string failures;
      {  // garbage instead of a handshake
        const internal::UniqueFd fd = Dial(*address);
        testing::SendRaw(fd.get(), std::string(200, 'G'));
        if (!DroppedSilently(fd.get(), std::chrono::seconds(10))) failures += "garbage kept; ";
      }
      {  // the wrong secret: gets the acceptor's challenge (72 bytes) and nothing more
        const internal::UniqueFd fd = Dial(*address);
        auto wrong = internal::Secret::FromText("not-the-secret", "test");
        internal::Handshake h(*wrong, internal::Handshake::Role::kDialer,
                              "chorus-tcp/1 0000000000000000 0 1");
        const Status s =
            internal::RunHandshake(fd.get(), h, internal::DeadlineAfter(std::chrono::seconds(10)));
        if (s.ok()) failures += "handshake with the wrong secret succeeded; ";
        // Only the challenge was read; nothing else may follow before the job hangs up.
        if (!DroppedSilently(fd.get(), std::chrono::seconds(10))) failures += "wrong secret kept; ";
      }
      {  // a claim length past the limit
        const internal::UniqueFd fd = Dial(*address);
        testing::SendRaw(fd.get(), std::string("CHRA\x00\x01\xff\xff", 8));
        if (!DroppedSilently(fd.get(), std::chrono::seconds(10))) failures += "long claim kept; ";
      }
      {  // connects and says nothing: dropped after the handshake timeout
        const internal::UniqueFd fd = Dial(*address);
        if (!DroppedSilently(fd.get(), timeout + std::chrono::seconds(12))) {
          failures += "staller kept; ";
        }
      }
      (void)(*store)->Set("stranger/done", "1");
      return failures;
    }
    CommOptions o = TcpOptions(rank, 2, dir.url());
    o.timeout = timeout;  // also the handshake timeout
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    for (int i = 0;; ++i) {
      std::vector<int32_t> v(1000, (rank + 1) * i);
      if (Status s = comm->AllReduce(std::span<int32_t>(v), ReduceOp::kSum); !s.ok()) {
        return "call " + std::to_string(i) + ": " + s.ToString();
      }
      if (v != std::vector<int32_t>(1000, 3 * i)) return "wrong sum in call " + std::to_string(i);
      if (rank == 0 && i == 0) (void)(*store)->Set("job/running", "1");
      // Both ranks stop together: a max-reduce of "the stranger is done".
      int32_t done = (*store)->Wait({"stranger/done"}, std::chrono::milliseconds(1)).ok() ? 1 : 0;
      if (Status s = comm->AllReduce(std::span<int32_t>(&done, 1), ReduceOp::kMax); !s.ok()) {
        return s.ToString();
      }
      if (done) return "";
      usleep(2000);
    }
  });
  ExpectAllOk(exits);
}

}  // namespace
}  // namespace chorus
