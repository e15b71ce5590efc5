// Shared memory that does not fit: a /dev/shm too small for the segment (Docker gives 64 MiB)
// is named before anything is mapped, with its free space, what is needed and what to do; and
// CommOptions::shm_dir puts the segment on another tmpfs.
//
// Each case runs in a child process with a mount namespace of its own, where a small tmpfs is
// mounted over /dev/shm: that needs root (CAP_SYS_ADMIN); elsewhere the tests are skipped.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "gtest/gtest.h"
#include "support/spawn.h"

namespace chorus {
namespace {

// "" when the calling process now has a private /dev/shm of `dev_shm` bytes and a tmpfs of
// `other` bytes at `other_dir` (when other > 0); else why not.
std::string PrivateTmpfs(const std::string& dev_shm, const std::string& other_dir,
                         const std::string& other) {
  if (unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + strerror(errno);
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return std::string("mount --make-rprivate /: ") + strerror(errno);
  }
  const std::string size = "size=" + dev_shm;
  if (mount("tmpfs", "/dev/shm", "tmpfs", 0, size.c_str()) != 0) {
    return std::string("mount tmpfs on /dev/shm: ") + strerror(errno);
  }
  if (!other.empty()) {
    std::filesystem::create_directories(other_dir);
    const std::string other_size = "size=" + other;
    if (mount("tmpfs", other_dir.c_str(), "tmpfs", 0, other_size.c_str()) != 0) {
      return "mount tmpfs on " + other_dir + ": " + strerror(errno);
    }
  }
  return "";
}

// Creates `size` shm ranks on threads of this process and all-reduces once; per rank the
// status of Create (or of the call, or "wrong sum").
std::vector<Status> ShmGroup(int size, const CommOptions& base) {
  auto store = MakeHashStore();
  std::vector<Status> status(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      CommOptions o = base;
      o.rank = r;
      o.size = size;
      o.store = store;
      o.transport = TransportKind::kShm;
      o.timeout = std::chrono::seconds(20);
      auto comm = Communicator::Create(o);
      Status& s = status[static_cast<size_t>(r)];
      if (!comm.ok()) {
        s = comm.status();
        return;
      }
      std::vector<int64_t> v(100000, r + 1);
      s = comm->AllReduce(std::span<int64_t>(v), ReduceOp::kSum);
      if (s.ok() && v != std::vector<int64_t>(v.size(), size * (size + 1) / 2)) {
        s = Internal("wrong sum");
      }
    });
  }
  for (auto& t : threads) t.join();
  return status;
}

bool Empty(const std::string& dir) {
  return std::filesystem::is_empty(dir);
}

class ShmSpace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs in a mount namespace";
  }
};

// Runs fn in a child with a 1 MiB /dev/shm and a 256 MiB tmpfs at /run/chorus-shm-test.
void InSmallDevShm(const std::function<std::string()>& fn) {
  const auto exits = testing::ForkRanks(1, [&](int) -> std::string {
    const std::string why = PrivateTmpfs("1m", "/run/chorus-shm-test", "256m");
    if (!why.empty()) return "SKIP " + why;
    return fn();
  });
  ASSERT_EQ(exits.size(), 1u);
  if (exits[0].report.rfind("SKIP ", 0) == 0) GTEST_SKIP() << exits[0].report.substr(5);
  EXPECT_TRUE(exits[0].ok()) << exits[0].report;
}

TEST_F(ShmSpace, ATooSmallDevShmIsNamedWithItsFreeSpaceAndTheWayOut) {
  InSmallDevShm([] {
    std::string report;
    const auto status = ShmGroup(3, CommOptions{});
    for (size_t r = 0; r < status.size(); ++r) {
      const Status& s = status[r];
      if (s.code() != StatusCode::kUnavailable) {
        report += "rank " + std::to_string(r) + ": not UNAVAILABLE: " + s.ToString() + "\n";
        continue;
      }
      for (const char* part : {"/dev/shm has", "MiB free of 1.0 MiB", "needs ", "--shm-size",
                               "CHORUS_SHM_DIR", "pipeline_depth"}) {
        if (s.message().find(part) == std::string::npos) {
          report += "rank " + std::to_string(r) + ": no '" + part + "' in " + s.ToString() + "\n";
        }
      }
      if (r != 0 && s.message().find("rank 0 could not make the shared memory") ==
                        std::string::npos) {
        report += "rank " + std::to_string(r) + " does not say rank 0 failed: " + s.ToString();
      }
    }
    if (!Empty("/dev/shm")) report += "left something in /dev/shm\n";
    return report;
  });
}

TEST_F(ShmSpace, ASegmentThatFitsTheSmallDevShmWorks) {
  InSmallDevShm([] {
    CommOptions o;
    o.segment_bytes = 16 << 10;  // 2 x 2 pairs x depth 4 x 16 KiB: well under 1 MiB
    o.pipeline_depth = 4;
    std::string report;
    for (const Status& s : ShmGroup(2, o)) {
      if (!s.ok()) report += s.ToString() + "\n";
    }
    if (!Empty("/dev/shm")) report += "left something in /dev/shm\n";
    return report;
  });
}

TEST_F(ShmSpace, ShmDirPutsTheSegmentOnAnotherTmpfs) {
  InSmallDevShm([] {
    CommOptions o;
    o.shm_dir = "/run/chorus-shm-test";
    std::string report;
    for (const Status& s : ShmGroup(4, o)) {
      if (!s.ok()) report += s.ToString() + "\n";
    }
    if (!Empty("/run/chorus-shm-test")) report += "left something in the shm_dir\n";
    if (!Empty("/dev/shm")) report += "used /dev/shm\n";
    return report;
  });
}

TEST_F(ShmSpace, AShmDirThatIsNotThereIsNamed) {
  InSmallDevShm([] {
    CommOptions o;
    o.shm_dir = "/run/chorus-shm-test/missing";
    std::string report;
    const auto status = ShmGroup(2, o);
    const Status& s = status[0];
    if (s.code() != StatusCode::kUnavailable ||
        s.message().find("/run/chorus-shm-test/missing") == std::string::npos) {
      report += "rank 0: " + s.ToString();
    }
    return report;
  });
}

}  // namespace
}  // namespace chorus
