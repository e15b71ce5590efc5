// Hostile and hard conditions: strangers holding thousands of connections to every port of a
// running TCP job whose links are made mid-job, a store flooded with idle connections while it is
// short of descriptors, ranks that run out of descriptors while accepting or dialling, and
// security logs that a flood cannot flood.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/log_limit.h"
#include "base/unique_fd.h"
#include "chorus/chorus.h"
#include "support/group.h"
#include "support/store_process.h"
#include "support/timing.h"
#include "transport/tcp/tcp_transport.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
// Every descriptor a test rank itself opens is numbered below this.
constexpr unsigned kOwnDescriptorsBelow = 1024;

// Raises this process's descriptor limit to `want` if it can; the limit it has afterwards.
rlim_t RaiseDescriptorLimit(rlim_t want) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur >= want) return limit.rlim_cur;
  rlimit raised{want, std::max(want, limit.rlim_max)};
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    raised = {limit.rlim_max, limit.rlim_max};
    setrlimit(RLIMIT_NOFILE, &raised);
  }
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

size_t ResidentKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  }
  return 0;
}

uint16_t PortOf(const std::string& address) {
  return static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

// Opens up to `n` connections to 127.0.0.1:`port` without waiting for them to complete, and
// keeps them (idle: they never send a byte).
void HoldConnections(uint16_t port, int n, std::vector<internal::UniqueFd>* held) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    internal::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return;  // out of descriptors: what we have will do
    connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
    held->push_back(std::move(fd));
  }
}

// The acceptance case: 4 TCP ranks run recursive doubling (links to their partners), then,
// with 2000 idle connections held open to every rank's port and to the store's, and a few
// slowloris clients besides, a ring (links it has not made yet), correctly.
TEST(Hostile, AJobFinishesWhileStrangersHoldThousandsOfConnectionsToEveryPort) {
  constexpr int kRanks = 4;
  constexpr int kPerPort = 2000;
  if (RaiseDescriptorLimit(6 * kPerPort + 256) < 6 * kPerPort + 128) {
    GTEST_SKIP() << "cannot raise the descriptor limit for " << 5 * kPerPort << " connections";
  }
  const testing::StoreProcess server({.secret = testing::kTestSecret});
  ASSERT_TRUE(server.ok());
  const std::string url = server.url();
  const auto exits = testing::ForkRanks(kRanks + 1, [&](int who) -> std::string {
    auto store = OpenStore(url, {.secret = testing::kTestSecret});
    if (!store.ok()) return store.status().ToString();
    if (who == kRanks) {  // the attacker, in its own process
      std::vector<std::string> ports;
      for (int r = 0; r < kRanks; ++r) {
        auto addr =
            (*store)->Get("chorus/world/1/tcp/addr/" + std::to_string(r), std::chrono::seconds(30));
        if (!addr.ok()) return "attacker: " + addr.status().ToString();
        ports.push_back(*addr);
      }
      if (!(*store)
               ->Wait({"phase1/0", "phase1/1", "phase1/2", "phase1/3"}, std::chrono::seconds(60))
               .ok()) {
        return "attacker: the job's first phase did not end";
      }
      std::vector<internal::UniqueFd> held;
      for (const std::string& p : ports) HoldConnections(PortOf(p), kPerPort, &held);
      HoldConnections(server.port(), kPerPort, &held);
      // Slowloris: a valid first message, a byte every 100 ms, on a few connections per port
      // (the ranks' handshake starts "CHRA", the store's hello "CHRS").
      std::vector<internal::UniqueFd> slow;
      for (const std::string& p : ports) HoldConnections(PortOf(p), 8, &slow);
      const size_t to_ranks = slow.size();
      HoldConnections(server.port(), 8, &slow);
      size_t sent = 0;
      (*store)->Set("attack", std::to_string(held.size())).IgnoreError();
      const auto until = Clock::now() + std::chrono::seconds(60);
      while (Clock::now() < until &&
             !(*store)->Wait({"done/0", "done/1", "done/2", "done/3"}, milliseconds(100)).ok()) {
        for (size_t i = 0; i < slow.size() && sent < 4; ++i) {
          const char* magic = i < to_ranks ? "CHRA" : "CHRS";
          send(slow[i].get(), magic + sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        ++sent;
      }
      return "";
    }
    // The ring's links are made mid-job, under attack, as in groups larger than
    // kTcpDialAllUpTo.
    internal::SetTcpDialAllUpToForTesting(0);
    CommOptions o = testing::GroupOptions(TransportKind::kTcp, who, kRanks, url);
    o.timeout = std::chrono::seconds(60);
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return "Create: " + comm.status().ToString();
    std::vector<float> v(1 << 16);
    auto check = [&](const char* algorithm) -> std::string {
      v.assign(v.size(), float(who + 1));
      const Status s =
          comm->AllReduce(std::span<float>(v), ReduceOp::kSum, {.algorithm = algorithm});
      if (!s.ok()) return std::string(algorithm) + ": " + s.ToString();
      for (float x : v) {
        if (x != 10.0f) return std::string(algorithm) + ": wrong sum";
      }
      return "";
    };
    if (std::string e = check("rd"); !e.empty()) return e;
    (*store)->Set("phase1/" + std::to_string(who), "1").IgnoreError();
    auto attack = (*store)->Get("attack", std::chrono::seconds(60));
    if (!attack.ok()) return "no attack: " + attack.status().ToString();
    for (const char* algorithm : {"ring", "oneshot", "rabenseifner", "ring"}) {
      if (std::string e = check(algorithm); !e.empty()) return e + " (under attack)";
    }
    (*store)->Set("done/" + std::to_string(who), "1").IgnoreError();
    if (who == 0) std::fprintf(stderr, "ran under attack of %s connections\n", attack->c_str());
    return "";
  });
  for (size_t i = 0; i < exits.size(); ++i) {
    EXPECT_TRUE(exits[i].ok()) << (i < kRanks ? "rank " : "attacker ") << i << ": "
                               << exits[i].report;
  }
}

// The store in a process whose descriptor limit is 1024 (the launcher's default), with 1500
// idle connections held to it: a communicator still meets through it promptly, the memory it
// costs stays small, and its log says what happened in a few lines, not one per connection.
TEST(Hostile, AStoreShortOfDescriptorsStillServesItsJob) {
  int log_pipe[2];
  ASSERT_EQ(pipe(log_pipe), 0);
  int port_pipe[2];
  ASSERT_EQ(pipe(port_pipe), 0);
  int go_pipe[2];  // the test says when the store is to report its memory
  ASSERT_EQ(pipe(go_pipe), 0);
  const pid_t store_pid = fork();
  if (store_pid == 0) {
    close(log_pipe[0]);
    close(port_pipe[0]);
    close(go_pipe[1]);
    dup2(log_pipe[1], STDERR_FILENO);
    rlimit limit{1024, 1024};
    setrlimit(RLIMIT_NOFILE, &limit);
    auto s = TcpStoreServer::Start({.secret = testing::kTestSecret});
    if (!s.ok()) _exit(1);
    const size_t before = ResidentKiB();
    const std::string port = std::to_string((*s)->port()) + "\n";
    if (write(port_pipe[1], port.data(), port.size()) < 0) _exit(1);
    // Once the job has run beside the flood: report the memory the flood cost, then keep
    // serving until killed.
    char go = 0;
    if (read(go_pipe[0], &go, 1) != 1) _exit(1);
    std::fprintf(stderr, "rss grew %zu KiB\n", ResidentKiB() - before);
    for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(milliseconds(100));
    _exit(0);
  }
  close(log_pipe[1]);
  close(port_pipe[1]);
  close(go_pipe[0]);
  char text[16] = {};
  ASSERT_GT(read(port_pipe[0], text, sizeof(text) - 1), 0);
  const uint16_t port = static_cast<uint16_t>(std::atoi(text));
  ASSERT_GE(RaiseDescriptorLimit(4096), 2048u);
  std::vector<internal::UniqueFd> held;
  HoldConnections(port, 1500, &held);
  std::this_thread::sleep_for(milliseconds(500));
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  const auto start = Clock::now();
  const auto exits = testing::ForkRanks(2, [&](int rank) -> std::string {
    CommOptions o = testing::GroupOptions(TransportKind::kShm, rank, 2, url);
    o.timeout = std::chrono::seconds(20);
    auto comm = Communicator::Create(o);
    return comm.ok() ? "" : comm.status().ToString();
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << e.report;
  EXPECT_LT(seconds, testing::kPromptSeconds);  // not the 20 s timeout
  ASSERT_EQ(write(go_pipe[1], "g", 1), 1);
  // The store's log up to its memory report (a hang-catching deadline only).
  std::string log;
  const auto until = Clock::now() + testing::kWrongPathWait;
  while (log.find('\n', log.find("rss grew ")) == std::string::npos && Clock::now() < until) {
    pollfd p{log_pipe[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(log_pipe[0], buf, sizeof(buf));
    if (n <= 0) break;
    log.append(buf, static_cast<size_t>(n));
  }
  held.clear();
  kill(store_pid, SIGKILL);
  waitpid(store_pid, nullptr, 0);
  close(log_pipe[0]);
  close(port_pipe[0]);
  close(go_pipe[1]);
  size_t lines = 0;
  for (char c : log) lines += c == '\n' ? 1 : 0;
  EXPECT_LT(lines, 20u) << log;
  const size_t at = log.find("rss grew ");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_LT(std::stoul(log.substr(at + 9)), 10u * 1024) << log;
}

// A rank that runs out of descriptors when it must dial a new link fails the job naming itself
// and the cause, at once; one that cannot accept gives up within a few seconds, naming itself,
// and does not spin meanwhile.
TEST(Hostile, ARankOutOfDescriptorsNamesItselfWhetherDiallingOrAccepting) {
  for (const int starved : {0, 2}) {  // rank 0 dials rank 3 for the ring; rank 2 accepts rank 1
    const testing::TempDir dir;
    const auto exits = testing::ForkRanks(4, [&](int rank) -> std::string {
      // Links made mid-job, as in groups larger than kTcpDialAllUpTo.
      internal::SetTcpDialAllUpToForTesting(0);
      CommOptions o = testing::GroupOptions(TransportKind::kTcp, rank, 4, dir.url());
      o.timeout = std::chrono::seconds(30);
      auto comm = Communicator::Create(o);
      if (!comm.ok()) return "Create: " + comm.status().ToString();
      std::vector<float> v(1024, 1.0f);
      if (Status s = comm->AllReduce(std::span<float>(v), ReduceOp::kSum, {.algorithm = "rd"});
          !s.ok()) {
        return "rd: " + s.ToString();
      }
      // Every rank is out of the first call before anyone runs short.
      std::ofstream(dir.path() + "/rd." + std::to_string(rank)) << "\n";
      for (int r = 0; r < 4; ++r) {
        while (!std::filesystem::exists(dir.path() + "/rd." + std::to_string(r))) {
          std::this_thread::sleep_for(milliseconds(5));
        }
      }
      std::vector<internal::UniqueFd> fillers;
      if (rank == starved) {
        // No descriptor left: the limit just above the highest one in use, every hole below
        // it filled. The job's own descriptors are all low; one that a CI harness leaked near
        // a limit of a million would leave a million holes to fill (seconds of CPU under
        // ASan), so this process closes those first: it is a fork and needs none of them.
        std::ofstream(dir.path() + "/starving") << "\n";
        close_range(kOwnDescriptorsBelow, ~0U, 0);
        int highest = 0;
        for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
          highest = std::max(highest, std::stoi(entry.path().filename().string()));
        }
        rlimit limit{};
        getrlimit(RLIMIT_NOFILE, &limit);
        limit.rlim_cur = static_cast<rlim_t>(highest) + 1;
        setrlimit(RLIMIT_NOFILE, &limit);
        for (;;) {
          internal::UniqueFd fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
          if (!fd) break;
          fillers.push_back(std::move(fd));
        }
        // rename needs no descriptor
        std::filesystem::rename(dir.path() + "/starving", dir.path() + "/starved");
      }
      // Nobody asks for a new link before the starved rank has run short.
      while (!std::filesystem::exists(dir.path() + "/starved")) {
        std::this_thread::sleep_for(milliseconds(5));
      }
      rusage before{};
      getrusage(RUSAGE_SELF, &before);
      const auto short_at = Clock::now();
      const Status s = comm->AllReduce(std::span<float>(v), ReduceOp::kSum, {.algorithm = "ring"});
      rusage after{};
      getrusage(RUSAGE_SELF, &after);
      const double cpu = static_cast<double>(after.ru_utime.tv_sec - before.ru_utime.tv_sec +
                                             after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
                         static_cast<double>(after.ru_utime.tv_usec - before.ru_utime.tv_usec +
                                             after.ru_stime.tv_usec - before.ru_stime.tv_usec) /
                             1e6;
      const double waited = std::chrono::duration<double>(Clock::now() - short_at).count();
      // Each rank says what it saw, so that a failure here explains itself.
      const std::string seen = "after " + std::to_string(waited) + " s and " + std::to_string(cpu) +
                               " s of CPU: " + s.ToString();
      if (s.ok()) return "the ring worked without descriptors";
      std::string report;
      const std::string who = "rank " + std::to_string(starved) + " ran out of file descriptors";
      if (s.message().find(who) == std::string::npos) report += "not named; ";
      if (cpu > 1.5) report += "spun; ";
      // The starved rank gives up after 2 s: the time left is for a loaded machine.
      if (waited > 2.0 + testing::kPromptSeconds) report += "too slow; ";
      if (!report.empty()) report += seen;
      return report;
    });
    for (size_t r = 0; r < exits.size(); ++r) {
      EXPECT_TRUE(exits[r].ok()) << "starved rank " << starved << ", rank " << r << " (status "
                                 << exits[r].status << "): " << exits[r].report;
    }
  }
}

TEST(LogLimiter, AFloodIsOneLineAndACount) {
  internal::LogLimiter log("test", std::chrono::seconds(1));
  for (int i = 0; i < 5000; ++i) log.Note("10.0.0.7:" + std::to_string(1000 + i), "wrong secret");
  log.Note("10.0.0.8:1", "wrong secret");
  log.Note("10.0.0.7:1", "garbage");
  EXPECT_EQ(log.lines(), 3u);  // one per (host, reason)
  log.Flush(internal::Clock::now() + std::chrono::seconds(2));
  EXPECT_EQ(log.lines(), 4u);  // "dropped 4,999 more connections from 10.0.0.7 ..."
  EXPECT_EQ(internal::WithCommas(4999), "4,999");
  EXPECT_EQ(internal::WithCommas(1234567), "1,234,567");
}

}  // namespace
}  // namespace chorus
