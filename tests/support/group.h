// Test helper: run one function per rank of a fresh communicator on any transport, so that a
// behaviour is written once and checked on thread, shm and TCP ranks alike.
//
//   auto reports = testing::RunGroup(TransportKind::kShm, 4, [](Communicator& comm) {
//     return comm.rank() == 0 ? "" : "something went wrong";  // "" means all is well
//   });
//
// Thread ranks run on threads of this process; shm and TCP ranks in forked processes that meet
// through a file store (ForkRanks: call it before the test starts any thread).
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "support/spawn.h"
#include "support/temp_dir.h"
#include "support/timing.h"

namespace chorus::testing {

// The wait mode named by CHORUS_WAIT (auto, sleep, sleep-checked), for the suites that run the
// matrix again with every wait asleep at once (tests/CMakeLists.txt: the "sleep." tests).
inline WaitMode TestWaitMode() {
  const char* mode = std::getenv("CHORUS_WAIT");
  if (mode == nullptr) return WaitMode::kAuto;
  for (WaitMode m : {WaitMode::kAuto, WaitMode::kSleep, WaitMode::kSleepChecked}) {
    if (WaitModeName(m) == mode) return m;
  }
  std::abort();  // a typo in the test set-up must not pass as the default
}

// CommOptions::slot_stores from CHORUS_SLOT_STORES (tests/CMakeLists.txt runs the thread and shm
// matrices' large cases once more with "stream", the stores a slow cross-core phase picks).
inline SlotStores TestSlotStores() {
  const char* stores = std::getenv("CHORUS_SLOT_STORES");
  if (stores == nullptr) return SlotStores::kAuto;
  for (SlotStores s : {SlotStores::kAuto, SlotStores::kCached, SlotStores::kStream}) {
    if (SlotStoresName(s) == stores) return s;
  }
  std::abort();
}

inline constexpr char kTestSecret[] = "chorus-test-secret";

// Waits (up to kWrongPathWait) until the meeting of the default communicator ("world", no job
// id) on the store at `url` holds `key`, given as the meeting writes it: "1/join/0" (round 1,
// rank 0's seat), "2/clash" (round 2 failed). Lets a test order its ranks' joins by what the
// store holds instead of by sleeps.
inline Status AwaitMeetingKey(const std::string& url, const std::string& key) {
  auto store = OpenStore(url, {.connect_timeout = kPrompt, .secret = std::string(kTestSecret)});
  if (!store.ok()) return store.status();
  return (*store)->Wait({"chorus/world/" + key}, kWrongPathWait);
}

// How many times longer a test's short deadlines must be in a sanitized build: TSan code runs
// 5-15x slower and ASan 2-3x, and an answer that takes a few ms may then take a second.
inline int SanitizerSlowdown() {
#if defined(__SANITIZE_THREAD__)
  return 4;
#elif defined(__SANITIZE_ADDRESS__)
  return 2;
#else
  return 1;
#endif
}

// The options a rank of a test group on `kind` is created with.
inline CommOptions GroupOptions(TransportKind kind, int rank, int size, const std::string& url,
                                CommOptions base = {}) {
  base.rank = rank;
  base.size = size;
  base.store_url = url;
  base.transport = kind;
  if (base.secret.empty()) base.secret = kTestSecret;
  return base;
}

// fn's report per rank ("" = fine); a rank whose Create failed reports that.
template <typename Fn>
std::vector<std::string> RunGroup(TransportKind kind, int size, Fn&& fn, CommOptions base = {}) {
  std::vector<std::string> reports(static_cast<size_t>(size));
  if (kind == TransportKind::kThread) {
    auto group = CreateLocalGroup(size, base);
    if (!group.ok()) return std::vector<std::string>(reports.size(), group.status().ToString());
    RunRanks(*group, [&](Communicator& comm) {
      const auto r = static_cast<size_t>(comm.rank());  // fn may move the communicator away
      reports[r] = fn(comm);
    });
    return reports;
  }
  const TempDir dir;
  const auto exits = ForkRanks(size, [&](int rank) -> std::string {
    auto comm = Communicator::Create(GroupOptions(kind, rank, size, dir.url(), base));
    if (!comm.ok()) return "Create: " + comm.status().ToString();
    return fn(*comm);
  });
  for (size_t r = 0; r < exits.size(); ++r) {
    reports[r] = exits[r].report;
    if (!exits[r].ok() && reports[r].empty()) {
      reports[r] = "exited with status " + std::to_string(exits[r].status);
    }
  }
  return reports;
}

inline std::string TransportParamName(TransportKind kind) {
  return std::string(TransportKindName(kind));
}

}  // namespace chorus::testing
