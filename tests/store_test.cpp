// Store tests. One contract suite runs unchanged over HashStore, FileStore, TcpStore and a
// PrefixStore over TcpStore: values, waits and their error messages, Add from many threads,
// Delete, binary data, limits, namespacing. Then processes (fork): FileStore and TcpStore shared
// by 8 processes with exact totals. Then the TcpStore's failure paths: a client that starts
// before its server, a server that dies under a waiting client, and peers that send garbage
// while a well-behaved client keeps working. Finally OpenStore's URL parsing.
//
// Timeouts are short (100-150 ms) where a wait is meant to fail and long (10 s or more) where it
// is meant to succeed, so a slow machine can only make the tests slower, not wrong. The only
// timing checks are loose upper bounds on "promptly".
#include "chorus/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/auth.h"
#include "rendezvous/store_internal.h"
#include "rendezvous/tcp_protocol.h"
#include "support/raw_socket.h"
#include "support/reserved_port.h"
#include "support/store_process.h"
#include "support/temp_dir.h"
#include "support/timing.h"

namespace chorus {
namespace {

namespace proto = internal::tcp_store;
using internal::UniqueFd;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;
using testing::TempDir;

constexpr milliseconds kLong = seconds(20);  // for waits that must succeed
// Every TcpStore client and server of these tests shares it (store_auth_test covers others).
constexpr char kSecret[] = "store-test-secret";

// The value of a call that must succeed; records a failure (and returns T{}) when it did not.
template <typename T>
T Must(Result<T> result) {
  if (!result.ok()) {
    ADD_FAILURE() << result.status();
    return T{};
  }
  return std::move(result).value();
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

enum class Kind { kHash, kFile, kTcp, kPrefixedTcp };

std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kHash:
      return "hash";
    case Kind::kFile:
      return "file";
    case Kind::kTcp:
      return "tcp";
    case Kind::kPrefixedTcp:
      return "prefixed_tcp";
  }
  return "unknown";
}

// A store and whatever keeps it alive (its directory or its server).
struct StoreUnderTest {
  std::unique_ptr<TempDir> dir;
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<testing::StoreProcess> server_process;  // instead of `server`, for forking
  std::string url;     // for more clients; empty for the hash store
  std::string prefix;  // what the store under test puts before every key
  std::shared_ptr<Store> store;

  // Another client of the same data: a new connection or a new FileStore object; the same
  // object for the in-process store.
  std::shared_ptr<Store> Client() const {
    if (url.empty()) return store;
    auto opened = OpenStore(url, {.connect_timeout = seconds(10), .secret = kSecret});
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return nullptr;
    return prefix.empty() ? *opened : MakePrefixStore(*opened, prefix);
  }
};

// `for_forking`: a TCP store is served by a child process, not by a thread of this one (see
// support/store_process.h).
StoreUnderTest Make(Kind kind, bool for_forking = false) {
  StoreUnderTest s;
  switch (kind) {
    case Kind::kHash:
      s.store = MakeHashStore();
      return s;
    case Kind::kFile:
      s.dir = std::make_unique<TempDir>();
      s.url = "file://" + s.dir->path() + "/store";
      break;
    case Kind::kTcp:
    case Kind::kPrefixedTcp: {
      if (for_forking) {
        s.server_process = std::make_unique<testing::StoreProcess>(
            TcpStoreServer::Options{.secret = kSecret});
        EXPECT_TRUE(s.server_process->ok());
        s.url = s.server_process->url();
        if (kind == Kind::kPrefixedTcp) s.prefix = "job/";
        break;
      }
      auto server = TcpStoreServer::Start({.secret = kSecret});
      EXPECT_TRUE(server.ok()) << server.status();
      if (!server.ok()) return s;
      s.server = std::move(server).value();
      s.url = s.server->url();
      if (kind == Kind::kPrefixedTcp) s.prefix = "job/";
      break;
    }
  }
  s.store = s.Client();
  return s;
}

class StoreContract : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    setup_ = Make(GetParam());
    store_ = setup_.store;
    ASSERT_NE(store_, nullptr);
  }
  // The key as the base store (and its error messages) sees it.
  std::string Full(const std::string& key) const { return setup_.prefix + key; }
  std::string Where() const { return "store " + store_->address() + ": "; }

  StoreUnderTest setup_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreContract, SetThenGetFromAnotherClient) {
  ASSERT_TRUE(store_->Set("rank/0", "hello").ok());
  auto got = store_->Get("rank/0", kLong);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "hello");
  auto other = setup_.Client();
  auto seen = other->Get("rank/0", kLong);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, "hello");
}

TEST_P(StoreContract, SetOverwrites) {
  ASSERT_TRUE(store_->Set("k", "first").ok());
  ASSERT_TRUE(store_->Set("k", "second, longer").ok());
  ASSERT_TRUE(store_->Set("k", "3").ok());
  auto got = store_->Get("k", kLong);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "3");
}

TEST_P(StoreContract, GetTimeoutNamesStoreKeyAndTime) {
  auto got = store_->Get("rank/7", milliseconds(100));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(got.status().message(), Where() + "waited 100 ms for key " + Full("rank/7"));
}

TEST_P(StoreContract, WaitTimeoutNamesOnlyTheMissingKeys) {
  ASSERT_TRUE(store_->Set("present/1", "x").ok());
  ASSERT_TRUE(store_->Set("present/3", "x").ok());
  Status s = store_->Wait({"present/1", "absent/2", "present/3", "absent/4"}, milliseconds(150));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            Where() + "waited 150 ms for keys " + Full("absent/2") + ", " + Full("absent/4"));
  EXPECT_THAT(s.message(), Not(HasSubstr("present")));
}

TEST_P(StoreContract, GetAndWaitReturnWhenAnotherClientSets) {
  Result<std::string> got = Status(StatusCode::kInternal, "not run");
  Status waited = Internal("not run");
  std::thread getter([&] { got = setup_.Client()->Get("late/a", kLong); });
  std::thread waiter([&] { waited = setup_.Client()->Wait({"late/a", "late/b"}, kLong); });
  std::this_thread::sleep_for(milliseconds(50));
  auto setter = setup_.Client();
  ASSERT_TRUE(setter->Set("late/a", "A").ok());
  ASSERT_TRUE(setter->Set("late/b", "B").ok());
  getter.join();
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "A");
  EXPECT_TRUE(waited.ok()) << waited;
}

// One store object shared by threads: a long Get must not hold up another thread's Set.
TEST_P(StoreContract, OneObjectSharedByWaitingAndSettingThreads) {
  Result<std::string> got = Status(StatusCode::kInternal, "not run");
  std::thread getter([&] { got = store_->Get("shared", kLong); });
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(store_->Set("shared", "yes").ok());
  getter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "yes");
}

TEST_P(StoreContract, ZeroTimeoutLooksOnceAndEmptyWaitSucceeds) {
  EXPECT_TRUE(store_->Wait({}, milliseconds(0)).ok());
  ASSERT_TRUE(store_->Set("here", "v").ok());
  auto got = store_->Get("here", milliseconds(0));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
  EXPECT_TRUE(store_->Wait({"here"}, milliseconds(0)).ok());
  // The largest timeout must not overflow a deadline.
  EXPECT_EQ(Must(store_->Get("here", milliseconds::max())), "v");
  EXPECT_TRUE(store_->Wait({"here"}, milliseconds::max()).ok());
  auto missing = store_->Get("nowhere", milliseconds(0));
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(missing.status().message(), Where() + "waited 0 ms for key " + Full("nowhere"));
}

TEST_P(StoreContract, AddFromManyThreadsCountsExactly) {
  constexpr int kThreads = 8;
  constexpr int kAdds = 100;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // Half the threads share the test's object, half have their own client.
    auto client = t % 2 == 0 ? store_ : setup_.Client();
    threads.emplace_back([&seen, t, client] {
      for (int i = 0; i < kAdds; ++i) {
        auto v = client->Add("counter", 1);
        seen[static_cast<size_t>(t)].push_back(v.ok() ? *v : -1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // Every Add returned a distinct new value: together exactly 1 .. 800.
  std::vector<int64_t> all;
  for (const auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kThreads * kAdds);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<int64_t>(i) + 1;
  EXPECT_EQ(all, expected);
  auto total = store_->Get("counter", kLong);
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, "800");
}

TEST_P(StoreContract, AddArithmeticAndErrors) {
  auto a = store_->Add("n", -5);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, -5);
  a = store_->Add("n", 7);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, 2);
  a = store_->Add("n", 0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, 2);
  EXPECT_EQ(Must(store_->Get("n", kLong)), "2");

  ASSERT_TRUE(store_->Set("text", "12abc").ok());
  a = store_->Add("text", 1);
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr(Where()));
  EXPECT_THAT(a.status().message(), HasSubstr("add to key " + Full("text")));
  EXPECT_THAT(a.status().message(), HasSubstr("not a decimal integer"));
  ASSERT_TRUE(store_->Set("empty", "").ok());
  EXPECT_EQ(store_->Add("empty", 1).status().code(), StatusCode::kInvalidArgument);

  const std::string max = std::to_string(INT64_MAX);
  ASSERT_TRUE(store_->Set("big", max).ok());
  a = store_->Add("big", 1);
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("overflows"));
  EXPECT_EQ(Must(store_->Get("big", kLong)), max);  // unchanged
  a = store_->Add("big", INT64_MIN);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, -1);
}

TEST_P(StoreContract, DeleteReportsWhetherTheKeyExisted) {
  ASSERT_TRUE(store_->Set("gone", "v").ok());
  auto d = store_->Delete("gone");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(*d);
  d = store_->Delete("gone");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(*d);
  EXPECT_EQ(store_->Get("gone", milliseconds(50)).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(store_->Wait({"gone"}, milliseconds(50)).code(), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(store_->Set("gone", "back").ok());
  EXPECT_EQ(Must(store_->Get("gone", kLong)), "back");
  // A deleted counter starts again from zero.
  ASSERT_TRUE(store_->Add("c", 5).ok());
  ASSERT_TRUE(store_->Delete("c").ok());
  EXPECT_EQ(Must(store_->Add("c", 1)), 1);
}

TEST_P(StoreContract, BinaryValuesAndAwkwardKeysRoundTrip) {
  std::string all_bytes;
  for (int i = 0; i < 512; ++i) all_bytes.push_back(static_cast<char>(i & 0xff));
  const std::vector<std::string> keys = {
      ".", "..",      "../escape",        "a/b/c", "a%2Fb", "%2F",
      "~", " space ", "\xd0\xba\xd0\xbb", "-_",    "A.b",   std::string("nul\0key", 7)};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(store_->Set(keys[i], std::to_string(i) + all_bytes).ok()) << i;
  }
  ASSERT_TRUE(store_->Set("empty", "").ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto got = store_->Get(keys[i], kLong);
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, std::to_string(i) + all_bytes) << i;
  }
  auto empty = store_->Get("empty", kLong);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");
  EXPECT_TRUE(store_->Wait(keys, kLong).ok());
}

TEST_P(StoreContract, LargeValue) {
  std::string value(size_t{1} << 20, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>((i * 31 + i / 256) & 0xff);
  ASSERT_TRUE(store_->Set("big", value).ok());
  auto got = setup_.Client()->Get("big", kLong);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == value);  // not EXPECT_EQ: a mismatch would print 2 MiB
}

TEST_P(StoreContract, LimitsAndBadArguments) {
  for (const Status& s :
       {store_->Set("", "v"), store_->Get("", kLong).status(), store_->Add("", 1).status(),
        store_->Wait({"ok", ""}, kLong), store_->Delete("").status()}) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("empty key")) << s;
  }
  const std::string longest(kStoreMaxKeyBytes - setup_.prefix.size(), 'k');
  ASSERT_TRUE(store_->Set(longest, "at the limit").ok());
  EXPECT_EQ(Must(store_->Get(longest, kLong)), "at the limit");
  std::string long_too = longest;
  long_too.back() = 'x';  // same first 200 bytes: FileStore must still keep them apart
  ASSERT_TRUE(store_->Set(long_too, "other").ok());
  EXPECT_EQ(Must(store_->Get(longest, kLong)), "at the limit");
  EXPECT_EQ(Must(store_->Get(long_too, kLong)), "other");
  Status too_long = store_->Set(longest + "k", "v");
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("exceeds the limit of 4096"));

  Status huge = store_->Set("huge", std::string(kStoreMaxValueBytes + 1, 'v'));
  EXPECT_EQ(huge.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.message(), HasSubstr("more than the limit"));
  EXPECT_EQ(store_->Get("k", milliseconds(-1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Wait({"k"}, milliseconds(-5)).code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreContract, PrefixStoresAreIsolated) {
  auto a = MakePrefixStore(store_, "a/");
  auto b = MakePrefixStore(store_, "b/");
  ASSERT_TRUE(a->Set("k", "from a").ok());
  ASSERT_TRUE(b->Set("k", "from b").ok());
  EXPECT_EQ(Must(a->Get("k", kLong)), "from a");
  EXPECT_EQ(Must(b->Get("k", kLong)), "from b");
  EXPECT_EQ(Must(store_->Get("a/k", kLong)), "from a");
  EXPECT_EQ(Must(a->Add("n", 1)), 1);
  EXPECT_EQ(Must(b->Add("n", 5)), 5);
  EXPECT_EQ(Must(a->Add("n", 1)), 2);
  EXPECT_TRUE(Must(a->Delete("k")));
  EXPECT_EQ(Must(b->Get("k", kLong)), "from b");
  Status s = a->Wait({"k", "n"}, milliseconds(100));
  EXPECT_EQ(s.message(), Where() + "waited 100 ms for key " + Full("a/k"));
  EXPECT_EQ(a->address(), store_->address());
  EXPECT_EQ(a->Set("", "v").code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreContract,
                         ::testing::Values(Kind::kHash, Kind::kFile, Kind::kTcp,
                                           Kind::kPrefixedTcp),
                         KindName);

// ----------------------------------------------------------------------------- processes

// Forks one child per entry; each runs fn(i) and exits with its return value (0 = success).
// Children use _exit so that nothing of the parent (gtest, the server thread's objects) runs
// twice. Returns the exit statuses.
std::vector<int> ForkAndWait(int n, const std::function<int(int)>& fn) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) _exit(fn(i));
    pids.push_back(pid);
  }
  std::vector<int> statuses;
  for (const pid_t pid : pids) {
    int status = -1;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) status = -1;
    statuses.push_back(status);
  }
  return statuses;
}

class StoreProcesses : public ::testing::TestWithParam<Kind> {};

// 8 processes each Add 100 times and publish a value, then read everyone's.
TEST_P(StoreProcesses, EightProcessesAddAndExchangeExactly) {
  constexpr int kProcs = 8;
  constexpr int kAdds = 100;
  StoreUnderTest setup = Make(GetParam(), /*for_forking=*/true);
  ASSERT_NE(setup.store, nullptr);
  const std::string url = setup.url;
  auto value_of = [](int i) { return "proc " + std::to_string(i) + std::string("\0\xff", 2); };
  const std::vector<int> statuses = ForkAndWait(kProcs, [&](int i) {
    auto store = OpenStore(url, {.connect_timeout = seconds(20), .secret = kSecret});
    if (!store.ok()) return 10;
    int64_t last = 0;
    for (int j = 0; j < kAdds; ++j) {
      auto v = (*store)->Add("counter", 1);
      if (!v.ok() || *v <= last || *v > kProcs * kAdds) return 11;
      last = *v;  // this process's own adds are ordered
    }
    if (!(*store)->Set("proc/" + std::to_string(i), value_of(i)).ok()) return 12;
    std::vector<std::string> keys;
    for (int k = 0; k < kProcs; ++k) keys.push_back("proc/" + std::to_string(k));
    if (!(*store)->Wait(keys, seconds(60)).ok()) return 13;
    for (int k = 0; k < kProcs; ++k) {
      auto got = (*store)->Get(keys[static_cast<size_t>(k)], seconds(60));
      if (!got.ok() || *got != value_of(k)) return 14;
    }
    return 0;
  });
  for (int i = 0; i < kProcs; ++i) {
    const int st = statuses[static_cast<size_t>(i)];
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << "child " << i << " status " << st << " exit code " << WEXITSTATUS(st);
  }
  auto total = setup.store->Get("counter", kLong);
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, std::to_string(kProcs * kAdds));
}

INSTANTIATE_TEST_SUITE_P(SharedStores, StoreProcesses, ::testing::Values(Kind::kFile, Kind::kTcp),
                         KindName);

// ----------------------------------------------------------------------------- FileStore

TEST(FileStore, CreatesTheDirectoryAndKeepsKeysInside) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/a/b/c";
  auto store = OpenStore("file://" + dir + "/");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->address(), "file://" + dir);
  ASSERT_TRUE((*store)->Set("../../escape", "v").ok());
  ASSERT_TRUE((*store)->Set("/abs/path", "v").ok());
  // Nothing appeared outside the store's directory.
  for (const std::string& outside : {tmp.path(), tmp.path() + "/a", tmp.path() + "/a/b"}) {
    for (const auto& entry : std::filesystem::directory_iterator(outside)) {
      EXPECT_TRUE(entry.is_directory()) << entry.path();
    }
  }
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_TRUE(entry.is_regular_file()) << entry.path();
    ++files;
  }
  EXPECT_EQ(files, 3u);  // two keys and the lock file
}

TEST(FileStore, PathThatIsAFileIsRejected) {
  TempDir tmp;
  const std::string file = tmp.path() + "/plain";
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  auto store = OpenStore("file://" + file);
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), HasSubstr(file));
}

// ----------------------------------------------------------------------------- TcpStore

std::string LocalUrl(uint16_t port) { return "tcp://127.0.0.1:" + std::to_string(port); }

TEST(TcpStore, ServerReportsItsUrlAndRefusesABusyPort) {
  auto server = TcpStoreServer::Start({.host = "127.0.0.1", .port = 0, .secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE((*server)->port(), 0);
  EXPECT_EQ((*server)->url(), LocalUrl((*server)->port()));
  auto second =
      TcpStoreServer::Start({.host = "127.0.0.1", .port = (*server)->port(), .secret = kSecret});
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("Address already in use"));
  auto bad_host = TcpStoreServer::Start({.host = "no-such-host.invalid", .secret = kSecret});
  EXPECT_EQ(bad_host.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_host.status().message(), HasSubstr("no-such-host.invalid"));
}

TEST(TcpStore, ClientThatStartsFirstRetriesUntilTheServerIsUp) {
  const testing::ReservedPort reserved;  // refused until a server of ours takes it
  const uint16_t port = reserved.port();
  Result<std::string> got = Status(StatusCode::kInternal, "not run");
  std::thread early([&] {
    auto store = OpenStore(LocalUrl(port), {.connect_timeout = seconds(20), .secret = kSecret});
    if (!store.ok()) {
      got = store.status();
      return;
    }
    got = (*store)->Get("greeting", kLong);
  });
  std::this_thread::sleep_for(milliseconds(300));
  auto server = TcpStoreServer::Start({.port = port, .secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = OpenStore((*server)->url(), {.secret = kSecret});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("greeting", "hi").ok());
  early.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "hi");
}

TEST(TcpStore, NoServerFailsAfterConnectTimeout) {
  const testing::ReservedPort reserved;  // nothing listens there
  const uint16_t port = reserved.port();
  const auto start = Clock::now();
  auto store = OpenStore(LocalUrl(port), {.connect_timeout = milliseconds(300), .secret = kSecret});
  EXPECT_LT(SecondsSince(start), testing::kPromptSeconds);
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(), HasSubstr("store " + LocalUrl(port) + ": cannot connect"));
  EXPECT_THAT(store.status().message(), HasSubstr("Connection refused"));
}

TEST(TcpStore, ServerDestroyedUnderWaitingClientsGivesUnavailablePromptly) {
  auto server = TcpStoreServer::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string url = (*server)->url();
  // One client per thread, each with the connection its open left in its pool: the requests
  // need no new connection, so they meet a lost one whether they were sent before the server
  // went or after (a thread held off past the sleep below would otherwise be refused a new
  // connection, which is a different error).
  auto store = OpenStore(url, {.connect_timeout = milliseconds(300), .secret = kSecret});
  ASSERT_TRUE(store.ok()) << store.status();
  auto other = OpenStore(url, {.connect_timeout = milliseconds(300), .secret = kSecret});
  ASSERT_TRUE(other.ok()) << other.status();
  Status get_status, wait_status;
  double get_seconds = 0, wait_seconds = 0;
  std::thread getter([&] {
    const auto start = Clock::now();
    get_status = (*store)->Get("never", seconds(60)).status();
    get_seconds = SecondsSince(start);
  });
  std::thread waiter([&] {
    const auto start = Clock::now();
    wait_status = (*other)->Wait({"never", "ever"}, seconds(60));
    wait_seconds = SecondsSince(start);
  });
  std::this_thread::sleep_for(milliseconds(200));
  server->reset();
  getter.join();
  waiter.join();
  for (const Status& s : {get_status, wait_status}) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_THAT(s.message(), HasSubstr("store " + url + ": connection lost (")) << s;
  }
  EXPECT_LT(get_seconds, testing::kPromptSeconds);  // not their 60 s
  EXPECT_LT(wait_seconds, testing::kPromptSeconds);
  // Later calls fail too, after trying to reconnect for connect_timeout.
  const auto start = Clock::now();
  Status later = (*store)->Set("k", "v");
  EXPECT_EQ(later.code(), StatusCode::kUnavailable) << later;
  later = (*store)->Set("k", "v");
  EXPECT_EQ(later.code(), StatusCode::kUnavailable) << later;
  EXPECT_LT(SecondsSince(start), testing::kPromptSeconds);
}

TEST(TcpStore, LateAnswerToATimedOutWaitIsNeverMistakenForAnotherReply) {
  auto server = TcpStoreServer::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = OpenStore((*server)->url(), {.secret = kSecret});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Get("slow", milliseconds(100)).status().code(),
            StatusCode::kDeadlineExceeded);
  ASSERT_TRUE((*store)->Set("slow", "late answer").ok());
  ASSERT_TRUE((*store)->Set("next", "right answer").ok());
  EXPECT_EQ(Must((*store)->Get("next", kLong)), "right answer");
  EXPECT_EQ(Must((*store)->Add("count", 3)), 3);
}

TEST(TcpStore, ManyWaitersWakeOnOneSet) {
  auto server = TcpStoreServer::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  constexpr int kWaiters = 16;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      auto store = OpenStore((*server)->url(), {.secret = kSecret});
      if (!store.ok()) return;
      // Half wait for one key, half for two, in either order.
      Status s = i % 2 == 0 ? (*store)->Wait({"go"}, kLong) : (*store)->Wait({"go", "set"}, kLong);
      if (s.ok() && Must((*store)->Get("go", kLong)) == "now") ok.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(milliseconds(100));
  auto store = OpenStore((*server)->url(), {.secret = kSecret});
  ASSERT_TRUE(store.ok()) << store.status();
  // "go" first: the two-key waiters wake, find "set" missing and wait again.
  ASSERT_TRUE((*store)->Set("go", "now").ok());
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE((*store)->Set("set", "").ok());
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), kWaiters);
}

// ---- peers that do not speak the protocol

using testing::RawConnect;
using testing::SendRaw;

// Reads until the server closes the connection; false if it is still open after kPrompt. `got`
// receives everything the server sent.
bool ClosedByServer(int fd, std::string* got = nullptr) {
  return testing::ClosedByPeer(fd, testing::kPrompt, got);
}

std::string GoodHello() { return proto::Hello(proto::kMagic, proto::kVersion, 0); }

// Connects and completes the hello and the handshake, so that what follows is read as frames.
UniqueFd Greeted(uint16_t port) {
  UniqueFd fd = RawConnect(port);
  EXPECT_TRUE(fd && SendRaw(fd.get(), GoodHello()));
  char reply[proto::kHelloBytes];
  EXPECT_EQ(recv(fd.get(), reply, sizeof(reply), MSG_WAITALL), static_cast<ssize_t>(sizeof(reply)));
  EXPECT_EQ(std::string(reply, sizeof(reply)), GoodHello());
  auto secret = internal::Secret::FromText(kSecret, "test");
  internal::Handshake handshake(*secret, internal::Handshake::Role::kDialer, "store");
  const Status s = internal::RunHandshake(fd.get(), handshake, Clock::now() + kLong);
  EXPECT_TRUE(s.ok()) << s;
  return fd;
}

std::string Frame(uint32_t length, const std::string& body) {
  std::string out;
  proto::PutU32(&out, length);
  return out + body;
}

TEST(TcpStore, PeersSendingGarbageAreDroppedWhileOthersKeepWorking) {
  auto server = TcpStoreServer::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  const uint16_t port = (*server)->port();
  auto good = OpenStore((*server)->url(), {.secret = kSecret});
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE((*good)->Set("before", "1").ok());
  // A well-behaved client parked on a key throughout the abuse.
  Result<std::string> parked = Status(StatusCode::kInternal, "not run");
  std::thread waiter([&, url = (*server)->url()] {
    auto client = OpenStore(url, {.secret = kSecret});
    parked = client.ok() ? (*client)->Get("after", kLong) : Result<std::string>(client.status());
  });
  // A peer that sends half a hello and then nothing stays connected and harms nobody.
  UniqueFd idle = RawConnect(port);
  ASSERT_TRUE(SendRaw(idle.get(), GoodHello().substr(0, 3)));

  struct Case {
    const char* name;
    bool greet;  // complete the hello first
    std::string bytes;
  };
  std::string set_with_long_key;
  set_with_long_key.push_back(static_cast<char>(proto::Op::kSet));
  proto::PutU32(&set_with_long_key, 1000);  // claims a 1000-byte key in a 8-byte frame
  set_with_long_key += "abc";
  std::string wait_huge_count;
  wait_huge_count.push_back(static_cast<char>(proto::Op::kWait));
  proto::PutU32(&wait_huge_count, 0xffffffffu);
  const std::string empty_key_set =
      proto::FrameWriter().U8(static_cast<uint8_t>(proto::Op::kSet)).Bytes("").Bytes("v").Finish();
  const std::string trailing_get = proto::FrameWriter()
                                       .U8(static_cast<uint8_t>(proto::Op::kGet))
                                       .Bytes("before")
                                       .U8(0)
                                       .U8(0)  // one byte too many
                                       .Finish();
  const std::vector<Case> cases = {
      {"http request", false, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"wrong magic", false, proto::Hello(0xdeadbeef, proto::kVersion, 0)},
      {"magic then garbage", false, GoodHello().substr(0, 2) + "zzzzzzzzzz"},
      {"huge length", true, Frame(0xffffffffu, "")},
      {"length just over the limit", true, Frame(proto::kMaxFrameBytes + 1, "x")},
      {"zero length", true, Frame(0, "")},
      {"unknown op", true, Frame(1, "\x63")},
      {"key longer than frame", true,
       Frame(static_cast<uint32_t>(set_with_long_key.size()), set_with_long_key)},
      {"wait count beyond frame", true,
       Frame(static_cast<uint32_t>(wait_huge_count.size()), wait_huge_count)},
      {"empty key", true, empty_key_set},
      {"trailing bytes", true, trailing_get},
  };
  for (const Case& c : cases) {
    UniqueFd fd = c.greet ? Greeted(port) : RawConnect(port);
    ASSERT_TRUE(fd) << c.name;
    ASSERT_TRUE(SendRaw(fd.get(), c.bytes)) << c.name;
    EXPECT_TRUE(ClosedByServer(fd.get())) << c.name;
    // The good client is unaffected after each one.
    auto got = (*good)->Get("before", kLong);
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
    EXPECT_EQ(*got, "1");
  }

  // A newer protocol version is told the server's version, then closed.
  UniqueFd newer = RawConnect(port);
  ASSERT_TRUE(SendRaw(newer.get(), proto::Hello(proto::kMagic, 99, 0)));
  std::string answer;
  EXPECT_TRUE(ClosedByServer(newer.get(), &answer));
  EXPECT_EQ(answer, proto::Hello(proto::kMagic, proto::kVersion,
                                 static_cast<uint16_t>(proto::HelloStatus::kBadVersion)));

  ASSERT_TRUE((*good)->Set("after", "done").ok());
  waiter.join();
  ASSERT_TRUE(parked.ok()) << parked.status();
  EXPECT_EQ(*parked, "done");
  EXPECT_EQ(Must((*good)->Add("n", 2)), 2);
}

// Reads one reply frame: status byte and payload.
std::pair<int, std::string> ReadReply(int fd) {
  char header[proto::kLengthBytes];
  if (recv(fd, header, sizeof(header), MSG_WAITALL) != static_cast<ssize_t>(sizeof(header))) {
    return {-1, ""};
  }
  std::string body(proto::LoadU32(header), '\0');
  if (body.empty() ||
      recv(fd, body.data(), body.size(), MSG_WAITALL) != static_cast<ssize_t>(body.size())) {
    return {-1, ""};
  }
  return {static_cast<unsigned char>(body[0]), body.substr(1)};
}

// Requests sent back to back are answered in order, even when the first one has to wait.
TEST(TcpStore, PipelinedRequestsAreAnsweredInOrder) {
  auto server = TcpStoreServer::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd raw = Greeted((*server)->port());
  const auto op = [](proto::Op o) { return static_cast<uint8_t>(o); };
  const std::string batch =
      proto::FrameWriter().U8(op(proto::Op::kGet)).Bytes("p").U8(1).Finish() +
      proto::FrameWriter().U8(op(proto::Op::kSet)).Bytes("q").Bytes("Q").Finish() +
      proto::FrameWriter().U8(op(proto::Op::kGet)).Bytes("q").U8(0).Finish() +
      proto::FrameWriter().U8(op(proto::Op::kGet)).Bytes("r").U8(0).Finish() +
      proto::FrameWriter().U8(op(proto::Op::kAdd)).Bytes("q").I64(1).Finish();
  ASSERT_TRUE(SendRaw(raw.get(), batch));
  std::this_thread::sleep_for(milliseconds(50));
  // Nothing after the parked Get has run yet.
  auto store = OpenStore((*server)->url(), {.secret = kSecret});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Get("q", milliseconds(50)).status().code(), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE((*store)->Set("p", "P").ok());
  const int ok = static_cast<int>(proto::ReplyStatus::kOk);
  EXPECT_EQ(ReadReply(raw.get()), std::make_pair(ok, std::string("P")));
  EXPECT_EQ(ReadReply(raw.get()), std::make_pair(ok, std::string()));
  EXPECT_EQ(ReadReply(raw.get()), std::make_pair(ok, std::string("Q")));
  EXPECT_EQ(ReadReply(raw.get()),
            std::make_pair(static_cast<int>(proto::ReplyStatus::kMissing), std::string()));
  auto [status, payload] = ReadReply(raw.get());
  EXPECT_EQ(status, static_cast<int>(proto::ReplyStatus::kError));
  EXPECT_THAT(payload, HasSubstr("add to key q"));
}

// A peer that floods requests and never reads the replies pins a bounded amount of server
// memory and does not slow anyone else down.
TEST(TcpStore, ClientThatNeverReadsDoesNotStallOthers) {
  auto server = TcpStoreServer::Start({.secret = kSecret});
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = OpenStore((*server)->url(), {.secret = kSecret});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("big", std::string(size_t{1} << 20, 'b')).ok());
  UniqueFd hog = Greeted((*server)->port());
  const std::string get =
      proto::FrameWriter().U8(static_cast<uint8_t>(proto::Op::kGet)).Bytes("big").U8(1).Finish();
  std::string flood;
  for (int i = 0; i < 2000; ++i) flood += get;
  // The server stops reading once its buffers fill, so this send cannot complete: send what
  // the socket takes without blocking.
  [[maybe_unused]] const ssize_t sent =
      send(hog.get(), flood.data(), flood.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*store)->Set("k", std::to_string(i)).ok());
    EXPECT_EQ(Must((*store)->Get("k", kLong)), std::to_string(i));
  }
}

// A client that reaches some other service fails at once, without retrying for the timeout.
TEST(TcpStore, ClientRejectsAServerThatIsNotAStore) {
  UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener.get(), 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread impostor([&] {
    UniqueFd conn(accept(listener.get(), nullptr, nullptr));
    char hello[proto::kHelloBytes];
    recv(conn.get(), hello, sizeof(hello), MSG_WAITALL);
    SendRaw(conn.get(), "HTTP/1.0 400 Bad Request\r\n\r\n");
  });
  const auto start = Clock::now();
  auto store = OpenStore(LocalUrl(ntohs(addr.sin_port)),
                         {.connect_timeout = seconds(30), .secret = kSecret});
  impostor.join();
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("not a chorus store server"));
  EXPECT_LT(SecondsSince(start), testing::kPromptSeconds);
}

// ----------------------------------------------------------------------------- OpenStore

TEST(OpenStore, MalformedUrlsAreRejectedWithTheReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "expected tcp://host:port or file:///absolute/path"},
      {"localhost:29500", "expected tcp://host:port"},
      {"http://x:1", "unknown scheme \"http\""},
      {"tcp://", "missing \":port\""},
      {"tcp://host", "missing \":port\""},
      {"tcp://:29500", "empty host"},
      {"tcp://host:", "port \"\" is not a number"},
      {"tcp://host:port", "port \"port\" is not a number"},
      {"tcp://host:0", "port \"0\""},
      {"tcp://host:65536", "port \"65536\""},
      {"tcp://host:-1", "port \"-1\""},
      {"tcp://host:29500/path", "port \"29500/path\""},
      {"tcp://::1:29500", "needs brackets"},
      {"tcp://[::1:29500", "'[' without ']'"},
      {"tcp://[::1]29500", "missing \":port\""},
      {"tcp://user@host:1", "contains a character"},
      {"file://", "absolute path"},
      {"file://relative/dir", "absolute path"},
  };
  for (const auto& [url, why] : cases) {
    auto store = OpenStore(url, {.connect_timeout = milliseconds(100), .secret = kSecret});
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(store.status().message(), HasSubstr("store URL \"" + url + "\": ")) << url;
    EXPECT_THAT(store.status().message(), HasSubstr(why)) << url;
  }
  auto negative = OpenStore("file:///tmp/x", {.connect_timeout = milliseconds(-1)});
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
}

TEST(OpenStore, BracketedIpv6HostIsParsed) {
  // Whether or not this machine has IPv6, the URL parses and the failure is about connecting.
  const testing::ReservedPort reserved;  // nothing listens there
  const uint16_t port = reserved.port();
  auto store = OpenStore("tcp://[::1]:" + std::to_string(port),
                         {.connect_timeout = milliseconds(100), .secret = kSecret});
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("store tcp://[::1]:" + std::to_string(port)));
}

}  // namespace
}  // namespace chorus
