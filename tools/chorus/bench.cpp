// chorus bench: nccl-tests-style timing of every collective over chorus
// ranks (threads of this process, or processes on this host), with exact result checking and the
// peer baselines' CSV rows.
//
//   chorus bench -n 4 --op allreduce -b 32 -e 64M -f 4 -c
//   chorus bench --transport shm -n 4 --ops all -b 32 -e 64M -f 4 -c
//   chorus bench --csv --lib chorus -n 4 --ops allreduce,reduce_scatter,allgather --sizes 32,1M,64M
//
// Ranks: --transport thread runs every rank as a thread with its own Communicator (one
// CreateLocalGroup). --transport shm re-executes this program as `chorus launch -n N --no-prefix
// -- chorus bench --rank-worker ...`: each worker process joins the job's communicator from the
// environment and runs the same per-rank code; the launcher stops the job when a rank fails and
// its exit status becomes ours. --transport tcp works the same way. Under mpirun or srun the
// processes are already there: each is one rank, and --transport mpi (in builds with
// chorus::mpi) runs them over MPI_COMM_WORLD through CreateMpiCommunicator:
//
//   mpirun -np 4 chorus bench --transport mpi --ops all -c --sizes 64,1M
//
// Only rank 0 prints, so every transport prints the same lines (the header names it).
//
// Sizes (see bench_config.h) are total buffer bytes as in nccl-tests. The table's count column is
// per rank like nccl-tests (all-gather: elements sent, reduce-scatter: elements received); the
// CSV's count and bytes are the total buffer, like the peers'.
//
// Timing, checking and buffers: see bench_rank.h.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "algo/select.h"
#include "bench_config.h"
#include "bench_rank.h"
#include "busy.h"
#include "chorus/chorus.h"
#include "commands.h"
#include "rank_group.h"
#include "tuning_env.h"

namespace chorus::cli {
namespace {

// Exit codes.
constexpr int kExitWrong = 1;
constexpr int kExitUsage = 2;
constexpr int kExitFailed = 3;
constexpr int kExitHung = 4;

// ------------------------------------------------------------------------------ the runs

CommOptions BenchCommOptions(const BenchConfig& cfg, TransportKind transport) {
  CommOptions options;
  options.timeout = cfg.timeout;
  options.transport = transport;
  if (cfg.segment_bytes > 0) options.segment_bytes = cfg.segment_bytes;
  options.tuning_file = TuningFileFromEnvironment();
  return options;
}

Watchdog::Options BenchWatch(const BenchConfig& cfg) {
  return {.program = "chorus bench",
          .stall = 2 * cfg.timeout + std::chrono::seconds(10),
          .exit_code = kExitHung};
}

int FailureExit(const Status& status) {
  std::fflush(stdout);
  std::fprintf(stderr, "chorus bench: FAILED: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
}

// Threads: every rank of this process. Processes: this worker's rank.
int RunBenchRanks(const BenchConfig& cfg) {
  uint64_t wrong = 0;
  const RankBody body = [&cfg, &wrong](RankGroup& group) {
    BenchRank rank(cfg, group);
    const Status status = rank.Run();
    if (group.rank() == 0) wrong = rank.total_wrong();
    return status;
  };
  Status status;
  switch (cfg.transport) {
    case TransportKind::kThread:
      status = RunThreadRanks(cfg.ranks, BenchCommOptions(cfg, TransportKind::kThread), body,
                              BenchWatch(cfg));
      break;
    case TransportKind::kMpi:
      status = RunMpiRank(BenchCommOptions(cfg, TransportKind::kMpi), body, BenchWatch(cfg));
      break;
    default:
      status = RunProcessRank(BenchCommOptions(cfg, cfg.transport), body, BenchWatch(cfg));
      break;
  }
  if (!status.ok()) return FailureExit(status);
  return wrong > 0 ? kExitWrong : 0;
}

void PrintAlgorithms() {
  std::vector<std::array<std::string, 4>> rows = {
      {"# collective", "name", "allowed when", "what it does"}};
  for (const internal::AlgorithmInfo& info : internal::Algorithms()) {
    rows.push_back({std::string(CollectiveKindName(info.kind)), std::string(info.name),
                    std::string(info.rule), std::string(info.description)});
  }
  std::array<size_t, 3> width{};
  for (const auto& row : rows) {
    for (size_t c = 0; c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::printf("%-*s  %-*s  %-*s  %s\n", static_cast<int>(width[0]), row[0].c_str(),
                static_cast<int>(width[1]), row[1].c_str(), static_cast<int>(width[2]),
                row[2].c_str(), row[3].c_str());
  }
  std::printf(
      "# Of the entries whose rule allows a call, the one the cost model predicts fastest runs\n"
      "# (see `chorus model`; ties go to the earlier entry); --algo NAME forces one.\n");
}

}  // namespace

void AddBenchCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* sub = app.add_subcommand(
      "bench", "nccl-tests-style benchmark of every collective over thread or process ranks");
  sub->add_option("--op", flags->op,
                  "collective: " + BenchOpNames() + " (also all_reduce, bcast, ...)")
      ->capture_default_str();
  sub->add_option("--ops", flags->ops,
                  "comma-separated collectives run one after another, or 'all' (overrides --op)");
  sub->add_option("-t,--transport", flags->transport,
                  "thread: ranks are threads of this process; shm: ranks are processes on this "
                  "host (started through chorus launch); tcp: processes over TCP on loopback; "
                  "mpi: under mpirun, each process one rank over MPI (builds with chorus::mpi)")
      ->capture_default_str();
  sub->add_option("-n,--ranks", flags->ranks,
                  "ranks (threads or processes); under mpirun or srun, the job's size instead")
      ->capture_default_str();
  sub->add_option("-b,--minbytes", flags->min_bytes,
                  "smallest total buffer size in bytes; K, M, G are powers of 1024")
      ->capture_default_str();
  sub->add_option("-e,--maxbytes", flags->max_bytes, "largest total buffer size in bytes")
      ->capture_default_str();
  sub->add_option("-f,--stepfactor", flags->step_factor, "multiply the size by this per step")
      ->capture_default_str();
  sub->add_option("-i,--stepbytes", flags->step_bytes, "add this many bytes per step instead");
  sub->add_option("--sizes", flags->sizes,
                  "comma-separated total buffer sizes (K, M, G allowed) instead of -b/-e/-f/-i");
  sub->add_option("-d,--datatype", flags->dtype,
                  "int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64")
      ->capture_default_str();
  sub->add_option("-o,--reduce-op", flags->redop, "sum prod min max avg")->capture_default_str();
  sub->add_option("-w,--warmup_iters,--warmup-iters", flags->warmup, "untimed calls per size")
      ->capture_default_str();
  sub->add_option("--iters", flags->iters,
                  "timed calls per size; 0 = enough for --min-seconds (20..10000 calls, capped "
                  "near 2 s)")
      ->capture_default_str();
  sub->add_option("--min-seconds", flags->min_seconds,
                  "with automatic --iters, time at least this long per size (barrier and call "
                  "per iteration); default 0.2, or 2 with --busy. Above 0.2 the count may reach "
                  "4,000,000 calls and slow sizes are not capped");
  sub->add_option("--busy", flags->busy,
                  "run N busy processes (unbound spinning loops) beside the job for the whole "
                  "run, the load of a data loader or a compile; implies --mean and 2 s per size");
  sub->add_flag("--mean", flags->mean,
                "also report the mean per call (table: a mean column; CSV: a line "
                "'#mean_us,MEAN,CALLS,SECONDS,MAX_US' before each row: the mean, the timed calls, "
                "their total time and the slowest of them)");
  const CLI::Option* check =
      sub->add_option("-c,--check", flags->check,
                      "check every output element: -c or --check=1 enables, --check=0 disables")
          ->expected(0, 1);
  flags->check_given = [check] { return check->count() > 0; };
  sub->add_flag("--csv", flags->csv,
                "print only CSV rows lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,"
                "busbw_GBs (out-of-place; count and bytes of the total buffer)");
  sub->add_flag("--header", flags->csv_header, "with --csv, print the CSV header line first");
  sub->add_option("--lib", flags->lib, "the CSV lib column")->capture_default_str();
  sub->add_option("--root", flags->root,
                  "the root rank of the rooted collectives (broadcast, reduce, gather, scatter "
                  "and their v forms)")
      ->capture_default_str();
  sub->add_option("--split", flags->split,
                  "how the v-collectives divide a size among the ranks: uneven (the peers' rule: "
                  "rank r gets r more elements than rank 0) or even (equal blocks, to time a "
                  "v-call against its even collective)")
      ->capture_default_str();
  sub->add_option("--timeout-ms", flags->timeout_ms, "deadline of every collective call")
      ->capture_default_str();
  sub->add_option("--segment-bytes", flags->segment_bytes,
                  "CommOptions::segment_bytes (K, M, G allowed); default: the library's");
  sub->add_option("--algo", flags->algo,
                  "run every timed call with this algorithm (CallOptions::algorithm); default: "
                  "the selection table's choice per call");
  sub->add_flag("--list-algos", flags->list_algos,
                "print the algorithm selection table (collective, name, rule, description) and "
                "exit");
  // Internal: set by the parent for each process it starts through chorus launch.
  sub->add_flag("--rank-worker", flags->rank_worker, "")->group("");
  sub->footer(
      "Time = median over iterations of the slowest rank's time; GB = 1e9; busbw = algbw x the "
      "nccl-tests factor: 2(p-1)/p for allreduce, 1 for broadcast and reduce, (p-1)/p for the "
      "others.\nExit status: 0 ok, 1 wrong results, 2 bad "
      "arguments, 3 a chorus call failed, 4 ranks hung; with --transport shm, that of the first "
      "rank to fail (128 + signal for a killed rank), as chorus launch reports it.");
  sub->callback([flags, &exit_code] {
    if (flags->list_algos) {
      PrintAlgorithms();
      exit_code = 0;
      return;
    }
    Result<BenchConfig> cfg = MakeConfig(*flags);
    if (!cfg.ok()) {
      std::fprintf(stderr, "chorus bench: %s\n", cfg.status().message().c_str());
      exit_code = kExitUsage;
      return;
    }
    if (cfg->transport == TransportKind::kMpi && !StartedByForeignLauncher()) {
      // chorus launch could start the processes, but each would then be an MPI job of its own.
      std::fprintf(stderr,
                   "chorus bench: --transport mpi runs as the ranks of an MPI job: start it with "
                   "mpirun -np N chorus bench --transport mpi ... (or srun)\n");
      exit_code = kExitUsage;
      return;
    }
    // The busy processes belong to the parent (a worker only knows how many there are); they
    // outlive an exec into chorus launch and die with this process.
    std::unique_ptr<BusyLoops> busy;
    if (cfg->busy > 0 && !flags->rank_worker && StartedByForeignLauncher()) {
      std::fprintf(stderr,
                   "chorus bench: --busy starts its busy processes from one parent; under mpirun "
                   "or srun every rank would: start them beside the job instead (as "
                   "scripts/compare-peers.sh BUSY=N does)\n");
      exit_code = kExitUsage;
      return;
    }
    if (cfg->busy > 0 && !flags->rank_worker) {
      Result<std::unique_ptr<BusyLoops>> started = BusyLoops::Start(cfg->busy);
      if (!started.ok()) {
        exit_code = FailureExit(started.status());
        return;
      }
      busy = std::move(*started);
    }
    if (flags->rank_worker || StartedByForeignLauncher()) {
      // This process is one of a launcher's ranks (ours, or mpirun's / srun's): processes meet
      // through shared memory on one host, TCP across hosts, unless tcp was asked for.
      if (cfg->transport == TransportKind::kThread) cfg->transport = TransportKind::kAuto;
      exit_code = RunBenchRanks(*cfg);
    } else if (cfg->transport != TransportKind::kThread) {
      exit_code = ExecUnderLauncher("chorus bench", cfg->ranks, WorkerArgs(*flags), kExitFailed);
    } else {
      exit_code = RunBenchRanks(*cfg);
    }
  });
}

}  // namespace chorus::cli
