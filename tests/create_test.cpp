// Communicator::Create and CommOptionsFromEnvironment: transport choice, option checks, and the
// launchers' environment variables with their precedence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace chorus {
namespace {

using ::testing::HasSubstr;

// Runs Create on `size` threads of this process sharing one HashStore; returns each rank's
// result after an all-reduce of rank + 1.
std::vector<Status> CreateOnThreads(int size, TransportKind kind,
                                    std::vector<TransportKind>* picked) {
  auto store = MakeHashStore();
  std::vector<Status> status(static_cast<size_t>(size));
  picked->assign(static_cast<size_t>(size), TransportKind::kAuto);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      CommOptions o;
      o.rank = r;
      o.size = size;
      o.store = store;
      o.transport = kind;
      o.timeout = std::chrono::seconds(20);
      auto comm = Communicator::Create(o);
      if (!comm.ok()) {
        status[static_cast<size_t>(r)] = comm.status();
        return;
      }
      (*picked)[static_cast<size_t>(r)] = comm->transport();
      std::vector<int64_t> v(1000, r + 1);
      status[static_cast<size_t>(r)] = comm->AllReduce(std::span<int64_t>(v), ReduceOp::kSum);
      if (status[static_cast<size_t>(r)].ok() &&
          v != std::vector<int64_t>(1000, size * (size + 1) / 2)) {
        status[static_cast<size_t>(r)] = Internal("wrong sum");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

TEST(Create, AutoPicksThreadsWhenRanksShareTheProcess) {
  std::vector<TransportKind> picked;
  for (const Status& s : CreateOnThreads(4, TransportKind::kAuto, &picked)) {
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(picked, std::vector<TransportKind>(4, TransportKind::kThread));
}

TEST(Create, ShmCanBeForcedForRanksInOneProcess) {
  std::vector<TransportKind> picked;
  for (const Status& s : CreateOnThreads(3, TransportKind::kShm, &picked)) {
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(picked, std::vector<TransportKind>(3, TransportKind::kShm));
}

TEST(Create, RejectsBadOptionsNamingThem) {
  CommOptions o;
  o.store = MakeHashStore();
  o.size = 2;
  o.rank = 2;
  EXPECT_THAT(Communicator::Create(o).status().message(),
              HasSubstr("Create: options.rank (2) must be in [0, options.size (2))"));
  o.rank = 0;
  o.store = nullptr;
  EXPECT_THAT(Communicator::Create(o).status().message(), HasSubstr("Create: no store"));
  o.store = MakeHashStore();
  o.name = "a/b";
  EXPECT_THAT(Communicator::Create(o).status().message(), HasSubstr("options.name"));
  o.name = "world";
  o.size = 0;
  EXPECT_THAT(Communicator::Create(o).status().message(), HasSubstr("options.size (0)"));
}

// Sets environment variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (const char* name : kAll) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  void Set(const char* name, const char* value) { setenv(name, value, 1); }

 private:
  static constexpr const char* kAll[] = {"CHORUS_RANK",
                                         "CHORUS_JOB_ID",
                                         "CHORUS_HOST_ID",
                                         "CHORUS_WAIT",
                                         "CHORUS_SLOT_STORES",
                                         "CHORUS_TUNING_FILE",
                                         "CHORUS_WORLD_SIZE",
                                         "CHORUS_STORE",
                                         "CHORUS_TIMEOUT_MS",
                                         "RANK",
                                         "WORLD_SIZE",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "TORCHELASTIC_RUN_ID",
                                         "TORCHELASTIC_RESTART_COUNT",
                                         "LOCAL_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_MCA_ess_base_jobid",
                                         "PMI_RANK",
                                         "PMI_SIZE",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_JOB_ID",
                                         "SLURM_STEP_ID",
                                         "SLURM_NNODES",
                                         "SLURM_JOB_NUM_NODES",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "MPI_LOCALNRANKS",
                                         "CHORUS_BOOTSTRAP_DIR",
                                         "CHORUS_SECRET",
                                         "CHORUS_SECRET_FILE",
                                         "CHORUS_SOCKET_IFNAME",
                                         "CHORUS_TRANSPORT",
                                         "CHORUS_ALGO"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(Environment, ChorusVariablesComeFirst) {
  ScopedEnv env;
  env.Set("CHORUS_RANK", "1");
  env.Set("CHORUS_WORLD_SIZE", "4");
  env.Set("CHORUS_STORE", "tcp://127.0.0.1:1234");
  env.Set("RANK", "3");  // torchrun's, ignored: chorus's own win
  env.Set("WORLD_SIZE", "8");
  env.Set("CHORUS_TIMEOUT_MS", "2500");
  auto o = CommOptionsFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->size, 4);
  EXPECT_EQ(o->store_url, "tcp://127.0.0.1:1234");
  EXPECT_FALSE(o->host_store);
  EXPECT_EQ(o->timeout, std::chrono::milliseconds(2500));
}

TEST(Environment, TorchrunRankZeroServesTheStore) {
  ScopedEnv env;
  env.Set("RANK", "0");
  env.Set("WORLD_SIZE", "2");
  env.Set("MASTER_ADDR", "127.0.0.1");
  env.Set("MASTER_PORT", "29500");
  auto o = CommOptionsFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->store_url, "tcp://127.0.0.1:29500");
  EXPECT_TRUE(o->host_store);
  env.Set("TORCHELASTIC_RUN_ID", "job");  // under torchrun itself its agent holds the port
  EXPECT_EQ(CommOptionsFromEnvironment()->store_url, "tcp://127.0.0.1:29501");

  // Every rank on this host and no secret: rank 0 serves a loopback store and hands out its
  // address and a fresh secret through a 0600 file that this run's ranks alone name alike.
  env.Set("LOCAL_WORLD_SIZE", "2");
  env.Set("TORCHELASTIC_RESTART_COUNT", "3");
  auto local = CommOptionsFromEnvironment();
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_THAT(local->store_url, HasSubstr("bootstrap://127.0.0.1/tmp/chorus-bootstrap-"));
  EXPECT_THAT(local->store_url, HasSubstr("-torchrun-29500-job-3"));
  EXPECT_FALSE(local->host_store);
  EXPECT_TRUE(local->secret.empty());
  // A secret given, from the environment or the caller, keeps the store on MASTER_PORT + 1.
  CommOptions with_secret;
  with_secret.secret = "s3cret";
  EXPECT_EQ(CommOptionsFromEnvironment(with_secret)->store_url, "tcp://127.0.0.1:29501");
  env.Set("CHORUS_SECRET", "s3cret");
  EXPECT_EQ(CommOptionsFromEnvironment()->store_url, "tcp://127.0.0.1:29501");
  // Ranks on several hosts need the job's secret: the store stays on MASTER_PORT + 1.
  env.Set("CHORUS_SECRET", "");
  env.Set("LOCAL_WORLD_SIZE", "1");
  EXPECT_EQ(CommOptionsFromEnvironment()->store_url, "tcp://127.0.0.1:29501");
}

TEST(Environment, MpiAndSlurmVariablesBootstrapThroughAFile) {
  ScopedEnv env;
  env.Set("OMPI_COMM_WORLD_RANK", "2");
  env.Set("OMPI_COMM_WORLD_SIZE", "3");
  env.Set("OMPI_MCA_ess_base_jobid", "77");
  env.Set("PMI_RANK", "0");  // lower precedence than Open MPI's
  env.Set("PMI_SIZE", "9");
  auto o = CommOptionsFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->size, 3);
  // Hosts unknown: rank 0 serves the store on its network interface.
  EXPECT_THAT(o->store_url, HasSubstr("bootstrap:///tmp/chorus-bootstrap-"));
  EXPECT_THAT(o->store_url, HasSubstr("ompi-77"));
  env.Set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");  // every rank on this host: loopback
  EXPECT_THAT(CommOptionsFromEnvironment()->store_url,
              HasSubstr("bootstrap://127.0.0.1/tmp/chorus-bootstrap-"));
  env.Set("CHORUS_BOOTSTRAP_DIR", "/shared/jobs");
  EXPECT_THAT(CommOptionsFromEnvironment()->store_url,
              HasSubstr("bootstrap://127.0.0.1/shared/jobs/chorus-bootstrap-"));

  ScopedEnv slurm;
  slurm.Set("SLURM_PROCID", "5");
  slurm.Set("SLURM_NTASKS", "6");
  slurm.Set("SLURM_JOB_ID", "123");
  auto s = CommOptionsFromEnvironment();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->rank, 5);
  EXPECT_THAT(s->store_url, HasSubstr("slurm-123.0"));
}

TEST(Environment, SecretInterfaceTransportAndAlgorithm) {
  ScopedEnv env;
  env.Set("CHORUS_RANK", "0");
  env.Set("CHORUS_WORLD_SIZE", "2");
  env.Set("CHORUS_STORE", "tcp://127.0.0.1:1234");
  env.Set("CHORUS_SECRET", "s3cret");
  env.Set("CHORUS_SOCKET_IFNAME", "eth1");
  env.Set("CHORUS_TRANSPORT", "tcp");
  env.Set("CHORUS_ALGO", "ring");
  auto o = CommOptionsFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->secret, "s3cret");
  EXPECT_EQ(o->listen, "eth1");
  EXPECT_EQ(o->transport, TransportKind::kTcp);
  EXPECT_EQ(o->algorithm, "ring");

  env.Set("CHORUS_TRANSPORT", "carrier-pigeon");
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(),
              HasSubstr("CHORUS_TRANSPORT=\"carrier-pigeon\""));
  env.Set("CHORUS_TRANSPORT", "auto");

  // A secret file: read when CHORUS_SECRET is absent, refused when others may read it.
  unsetenv("CHORUS_SECRET");
  char path[] = "/tmp/chorus-secret-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "from-file\n", 10), 10);
  close(fd);
  env.Set("CHORUS_SECRET_FILE", path);
  ASSERT_EQ(chmod(path, 0600), 0);
  auto f = CommOptionsFromEnvironment();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->secret, "from-file");
  ASSERT_EQ(chmod(path, 0644), 0);
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(), HasSubstr(path));
  unlink(path);
}

TEST(Environment, ErrorsNameTheVariable) {
  ScopedEnv env;
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(), HasSubstr("no rank and world size"));
  env.Set("CHORUS_RANK", "two");
  env.Set("CHORUS_WORLD_SIZE", "4");
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(),
              HasSubstr("CHORUS_RANK=\"two\" is not an integer"));
  env.Set("CHORUS_RANK", "1");
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(), HasSubstr("no store"));
  env.Set("CHORUS_RANK", "5");
  env.Set("CHORUS_STORE", "file:///tmp/x");
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(),
              HasSubstr("environment: CHORUS_RANK=5 is not below CHORUS_WORLD_SIZE=4"));
  env.Set("CHORUS_RANK", "1");
  env.Set("CHORUS_WAIT", "nap");
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(),
              HasSubstr("CHORUS_WAIT=\"nap\" is not one of auto, sleep, sleep-checked"));
  env.Set("CHORUS_WAIT", "sleep");
  env.Set("CHORUS_SLOT_STORES", "fast");
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(),
              HasSubstr("CHORUS_SLOT_STORES=\"fast\" is not one of auto, cached, stream"));
  env.Set("CHORUS_SLOT_STORES", "stream");
  {
    const auto options = CommOptionsFromEnvironment();
    ASSERT_TRUE(options.ok()) << options.status().ToString();
    EXPECT_EQ(options->slot_stores, SlotStores::kStream);
    EXPECT_EQ(options->wait, WaitMode::kSleep);
  }
  unsetenv("CHORUS_SLOT_STORES");
  env.Set("CHORUS_TUNING_FILE", "/no/such/tuning.conf");
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(),
              HasSubstr("CHORUS_TUNING_FILE=\"/no/such/tuning.conf\": no such file"));
  unsetenv("CHORUS_TUNING_FILE");
  unsetenv("CHORUS_WAIT");
  unsetenv("CHORUS_RANK");
  unsetenv("CHORUS_WORLD_SIZE");
  unsetenv("CHORUS_STORE");
  ScopedEnv half;
  half.Set("PMI_RANK", "1");
  EXPECT_THAT(CommOptionsFromEnvironment().status().message(),
              HasSubstr("sets PMI_RANK but not PMI_SIZE"));
}

TEST(Environment, JobIdWaitModeAndHostIdComeFromTheLauncher) {
  ScopedEnv env;
  env.Set("CHORUS_RANK", "0");
  env.Set("CHORUS_WORLD_SIZE", "2");
  env.Set("CHORUS_STORE", "file:///tmp/x");
  env.Set("CHORUS_TUNING_FILE", "builtin");
  auto plain = CommOptionsFromEnvironment();
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->job_id, "");
  EXPECT_EQ(plain->wait, WaitMode::kAuto);
  EXPECT_EQ(plain->tuning_file, "");  // builtin: the defaults
  env.Set("TORCHELASTIC_RUN_ID", "abc");
  EXPECT_EQ(CommOptionsFromEnvironment()->job_id, "torchrun-abc");
  env.Set("CHORUS_JOB_ID", "0123abcd");  // chorus launch's, first
  env.Set("CHORUS_WAIT", "sleep-checked");
  env.Set("CHORUS_HOST_ID", "rack3-node7");
  auto o = CommOptionsFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->job_id, "0123abcd");
  EXPECT_EQ(o->wait, WaitMode::kSleepChecked);
  EXPECT_EQ(o->host_id, "rack3-node7");
  // What the caller set is kept.
  EXPECT_EQ(CommOptionsFromEnvironment({.wait = WaitMode::kSleep})->wait, WaitMode::kSleep);
}

}  // namespace
}  // namespace chorus
