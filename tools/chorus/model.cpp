// chorus model: the cost model next to the measurement, for one collective shape.
//
//   chorus model --op allreduce -n 4 --bytes 1M --transport shm
//   chorus model --op allgather -n 3 --bytes 64K --no-measure
//   chorus model --op allgatherv -n 4 --counts 0,5,100,7
//   chorus model --op broadcast -n 5 --bytes 1M --per-rank --root 2
//
// One row per algorithm of the collective: the model's steps and bytes per rank, its predicted
// time (model/algorithm_cost.h, with the parameters of the tuning in use: the tuning file or the
// built-in defaults), the median measured by `chorus bench --algo NAME --csv` in a child process
// (bench_child.h; skipped with --no-measure), and whether the selection rule allows it for this
// shape. The last lines say which algorithm the library's selection (src/algo/select.h) picks
// for the shape and why, and which allowed algorithm the model predicts fastest.
//
// With --per-rank, or --counts (the v-collectives' uneven blocks), it prints instead, for each
// algorithm and rank, the bytes the model says the rank sends and receives (model/rank_bytes.h)
// beside the bytes the traffic counters show after a real call on thread ranks, and exits 1 if
// any differ.
//
// Algorithms the model knows but this build's selection table lacks are listed as "not in
// library", without a measurement. The size is rounded as `chorus bench` rounds it (a whole
// number of float32 elements per rank), and the prediction uses the rounded size.
#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "algo/select.h"
#include "base/collectives.h"
#include "bench_child.h"
#include "bench_config.h"
#include "chorus/chorus.h"
#include "commands.h"
#include "model/algorithm_cost.h"
#include "model/rank_bytes.h"
#include "model/tuning.h"
#include "rank_group.h"
#include "tuning_env.h"

namespace chorus::cli {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct ModelFlags {
  std::string op = "allreduce";
  int ranks = 2;
  std::string bytes = "1M";
  std::string transport = "thread";
  bool measure = true;
  int iters = 30;
  std::vector<size_t> counts;  // --counts: a v-collective's blocks, in elements
  bool per_rank = false;       // --per-rank: bytes per rank, the model's against the counters
  int root = 0;
};

struct Row {
  std::string name;
  const internal::AlgorithmInfo* info = nullptr;
  model::AlgorithmTerms terms;
  double predicted_s = 0;
  std::optional<double> measured_s;
  std::string measure_error;
  bool allowed = false;  // the selection rule accepts this shape
};

std::string Micros(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), seconds >= 1e-2 ? "%.0f" : "%.2f", seconds * 1e6);
  return buf;
}

Result<double> MeasureAlgorithm(const ModelFlags& flags, BenchOp op, std::string_view name,
                                size_t bytes) {
  Result<BenchChildOutput> out =
      RunBenchChild({"--transport", flags.transport, "-n", std::to_string(flags.ranks), "--op",
                     std::string(BenchOpName(op)), "--algo", std::string(name), "--sizes",
                     std::to_string(bytes), "--iters", std::to_string(flags.iters), "-w", "3"});
  if (!out.ok()) return out.status();
  if (out->rows.size() != 1) return Internal("chorus bench printed no timing");
  return out->rows.front().median_us * 1e-6;
}

// The counts of rank r of a v-call from --counts: p entries are the shared counts (for
// all-to-all-v: every rank sends counts[q] to rank q); p * p entries, all-to-all-v only, are
// row i rank i's send_counts.
struct VariedCounts {
  std::vector<size_t> send;
  std::vector<size_t> recv;
};
VariedCounts CountsOfRank(const std::vector<size_t>& flat, int p, int r, bool personal) {
  const auto n = static_cast<size_t>(p);
  const auto u = static_cast<size_t>(r);
  VariedCounts v;
  if (!personal) {
    v.send = flat;
    v.recv = flat;
    return v;
  }
  for (size_t q = 0; q < n; ++q) {
    v.send.push_back(flat.size() == n ? flat[q] : flat[u * n + q]);
    v.recv.push_back(flat.size() == n ? flat[u] : flat[q * n + u]);
  }
  return v;
}

// --counts or --per-rank: the model's bytes per rank (model/rank_bytes.h) against the counters
// of one call of each algorithm on thread ranks. `block` is the even collectives' block (the
// --bytes size in float32 elements, as chorus bench rounds it); a v-collective's come from
// --counts.
int RunPerRankModel(const ModelFlags& flags, CollectiveKind kind, size_t block) {
  const internal::CollectiveInfo& c = internal::Collective(kind);
  const int p = flags.ranks;
  const auto n = static_cast<size_t>(p);
  const bool personal = c.counts == internal::Counts::kBothAreP;
  if (c.varied != !flags.counts.empty() ||
      (c.varied && flags.counts.size() != n && !(personal && flags.counts.size() == n * n))) {
    std::fprintf(stderr,
                 "chorus model: --counts takes a v-collective (allgatherv, reducescatterv, "
                 "alltoallv, gatherv, scatterv) and -n entries (alltoallv: -n or -n * -n); "
                 "a v-collective's --per-rank needs --counts\n");
    return kExitUsage;
  }
  const int root = flags.root;
  const internal::CallCounts even = internal::CountsFor(c, block, p);
  std::string shape;
  if (c.varied) {
    for (size_t x : flags.counts) shape += (shape.empty() ? "counts " : ",") + std::to_string(x);
  } else {
    shape = std::to_string(even.total * 4) + " B";
  }
  std::printf(
      "# chorus model: %s, %d ranks, %s (float32%s): bytes per rank, the model's against the "
      "counters of one call on thread ranks\n",
      std::string(c.name).c_str(), p, shape.c_str(),
      c.rooted ? (", root " + std::to_string(root)).c_str() : "");
  std::printf("# %-17s %5s %14s %14s %14s %14s\n", "algorithm", "rank", "model sent",
              "counted sent", "model recv", "counted recv");
  // Each rank's arrays, the same for every algorithm.
  std::vector<VariedCounts> arrays(n);
  for (int r = 0; r < p && c.varied; ++r) {
    arrays[static_cast<size_t>(r)] = CountsOfRank(flags.counts, p, r, personal);
  }
  bool all_equal = true;
  for (const internal::AlgorithmInfo& info : internal::Algorithms()) {
    if (info.kind != kind || info.name == "hierarchical") continue;  // needs several hosts
    auto group = CreateLocalGroup(p);
    if (!group.ok()) {
      std::fprintf(stderr, "chorus model: %s\n", group.status().ToString().c_str());
      return kExitFailed;
    }
    std::vector<Traffic> counted(n);
    std::vector<Status> status(n, Status::Ok());
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r) {
      threads.emplace_back([&, r] {
        Communicator& comm = (*group)[static_cast<size_t>(r)];
        const VariedCounts& v = arrays[static_cast<size_t>(r)];
        // The root's buffers on every rank (a root-only buffer is ignored elsewhere); a buffer
        // of one v-block holds the rank's own.
        const size_t own = c.varied ? flags.counts[personal ? 0 : static_cast<size_t>(r)] : 0;
        internal::CallArgs args{kind,
                                {nullptr, c.varied ? own : even.send, DataType::kFloat32},
                                {nullptr, c.varied ? own : even.recv, DataType::kFloat32},
                                ReduceOp::kSum,
                                root,
                                {},
                                {}};
        if (c.varied && internal::SendIsPerRank(c.counts)) args.send_counts = v.send;
        if (c.varied && internal::RecvIsPerRank(c.counts)) args.recv_counts = v.recv;
        const internal::CallCounts want = c.varied ? internal::VariedCountsOf(c, args, r) : even;
        std::vector<float> send(want.send, 1.0f), recv(want.recv);
        args.send = {send.data(), send.size(), DataType::kFloat32};
        args.recv = {recv.data(), recv.size(), DataType::kFloat32};
        status[static_cast<size_t>(r)] =
            internal::RunCollective(comm, args, {.algorithm = std::string(info.name)});
        counted[static_cast<size_t>(r)] = comm.traffic().of(kind);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < p; ++r) {
      const auto u = static_cast<size_t>(r);
      if (!status[u].ok()) {
        std::printf("  %-17s %5d  the call failed: %s\n", std::string(info.name).c_str(), r,
                    status[u].ToString().c_str());
        all_equal = false;
        continue;
      }
      model::RankCall call{.kind = kind, .ranks = p, .rank = r, .root = root, .elem = 4};
      const VariedCounts& v = arrays[u];
      if (c.varied) {
        call.send_counts = personal ? v.send : flags.counts;
        call.recv_counts = v.recv;
      } else {
        call.count = even.total;
      }
      const std::optional<model::RankBytes> m = model::RankBytesOf(info.name, call);
      const auto text = [&](std::optional<uint64_t> x) {
        return x ? std::to_string(*x) : std::string("-");
      };
      const std::optional<uint64_t> ms = m ? std::optional<uint64_t>(m->sent) : std::nullopt;
      const std::optional<uint64_t> mr = m ? std::optional<uint64_t>(m->received) : std::nullopt;
      const bool equal = m && ms == counted[u].bytes_sent && mr == counted[u].bytes_received;
      all_equal = all_equal && equal;
      std::printf("  %-17s %5d %14s %14llu %14s %14llu%s\n", std::string(info.name).c_str(), r,
                  text(ms).c_str(), static_cast<unsigned long long>(counted[u].bytes_sent),
                  text(mr).c_str(), static_cast<unsigned long long>(counted[u].bytes_received),
                  equal ? "" : "  differs");
    }
  }
  std::printf(all_equal ? "model and counters agree on every rank\n"
                        : "model and counters DIFFER\n");
  return all_equal ? 0 : kExitFailed;
}

int RunModel(const ModelFlags& flags) {
  const std::optional<BenchOp> op = ParseBenchOp(flags.op);
  const std::optional<size_t> requested_bytes = ParseBytes(flags.bytes);
  const std::optional<TransportKind> transport = ParseCliTransport(flags.transport);
  std::string usage;
  if (!op || !IsCollectiveOp(*op)) {
    usage = "--op: unknown collective '" + flags.op + "' (" + BenchOpNames(true) + ")";
  }
  if (!requested_bytes || *requested_bytes == 0) {
    usage = "--bytes: '" + flags.bytes + "' is not a positive size (4, 1K, 1M, 64M)";
  }
  if (!transport) usage = "--transport: unknown transport '" + flags.transport + "'";
  if (flags.ranks < 1 || flags.ranks > 1024) usage = "-n: ranks must be in [1, 1024]";
  if (flags.iters < 1) usage = "--iters: must be at least 1";
  if (!usage.empty()) {
    std::fprintf(stderr, "chorus model: %s\n", usage.c_str());
    return kExitUsage;
  }
  const CollectiveKind kind = KindOf(*op);
  if (flags.root < 0 || flags.root >= flags.ranks) {
    std::fprintf(stderr, "chorus model: --root: must be in [0, -n)\n");
    return kExitUsage;
  }
  if (!flags.counts.empty()) return RunPerRankModel(flags, kind, 0);

  // The size as chorus bench runs it: whole float32 elements, a multiple of p for RS and AG.
  BenchConfig sizing;
  sizing.sizes = {*requested_bytes};
  const std::vector<SizePoint> points = MakeSizes(sizing, *op, flags.ranks);
  const size_t bytes = points.front().total * DataTypeSize(sizing.dtype);
  if (flags.per_rank) return RunPerRankModel(flags, kind, points.front().block);

  Result<model::Tuning> tuning = model::TuningFromFile(TuningFileFromEnvironment());
  if (!tuning.ok()) {
    std::fprintf(stderr, "chorus model: %s\n(run chorus tune to rewrite it)\n",
                 tuning.status().message().c_str());
    return kExitFailed;
  }
  const model::MachineParams& params = tuning->For(*transport);
  // The cores this process may run on, as the library counts them for a one-host job.
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0
                        ? CPU_COUNT(&set)
                        : static_cast<int>(std::thread::hardware_concurrency());
  const double oversubscription = model::OversubscriptionFactor(flags.ranks, cores);

  // The shape a communicator of these ranks would select with (one host).
  const internal::CallShapeForSelection shape{.kind = kind,
                                              .transport = *transport,
                                              .ranks = flags.ranks,
                                              .bytes = bytes,
                                              .multi_host = false,
                                              .cores = cores,
                                              .params = &params};
  std::vector<Row> rows;
  for (const internal::AlgorithmInfo& info : internal::Algorithms()) {
    if (info.kind != kind) continue;
    rows.push_back({.name = std::string(info.name), .info = &info, .allowed = info.allowed(shape)});
  }

  std::printf("# chorus model: %s, %d ranks, %zu B (float32), transport %s, %d cores\n",
              std::string(BenchOpName(*op)).c_str(), flags.ranks, bytes, flags.transport.c_str(),
              cores);
  std::printf("# parameters (%s) from %s: alpha %.3g us, beta %.3g GB/s, gamma %.3g GB/s\n",
              flags.transport.c_str(), tuning->source.c_str(), params.alpha_s * 1e6,
              1e-9 / params.beta_s_per_byte, 1e-9 / params.gamma_s_per_byte);
  if (oversubscription > 1) {
    std::printf("# %d ranks on %d cores: every term is scaled by %.3g\n", flags.ranks, cores,
                oversubscription);
  }
  std::fflush(stdout);

  for (Row& row : rows) {
    row.terms = row.info->terms(flags.ranks);
    row.predicted_s = internal::PredictedSeconds(*row.info, shape);
    if (!flags.measure) continue;
    Result<double> measured = MeasureAlgorithm(flags, *op, row.name, bytes);
    if (measured.ok()) {
      row.measured_s = *measured;
    } else {
      row.measure_error = measured.status().message();
    }
  }

  int name_width = 13;  // the longest name, so that the columns line up
  for (const Row& row : rows) name_width = std::max(name_width, static_cast<int>(row.name.size()));
  std::printf("# %-*s %6s %14s %14s %13s %7s  %s\n", name_width, "algorithm", "steps",
              "sent/rank(B)", "predicted(us)", "measured(us)", "ratio", "rule");
  for (const Row& row : rows) {
    const std::string steps = std::to_string(static_cast<long>(row.terms.steps));
    char sent[32];
    std::snprintf(sent, sizeof(sent), "%.0f", row.terms.sent * bytes);
    const std::string predicted = Micros(row.predicted_s);
    std::string measured = "-";
    std::string ratio = "-";
    if (row.measured_s) {
      measured = Micros(*row.measured_s);
      if (row.predicted_s > 0) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.2f", *row.measured_s / row.predicted_s);
        ratio = buf;
      }
    } else if (!row.measure_error.empty()) {
      measured = "failed";
    }
    const char* rule = row.allowed ? "applies" : "no";
    std::printf("  %-*s %6s %14s %14s %13s %7s  %s\n", name_width, row.name.c_str(), steps.c_str(),
                sent, predicted.c_str(), measured.c_str(), ratio.c_str(), rule);
  }
  for (const Row& row : rows) {
    if (!row.measure_error.empty()) {
      std::printf("# %s: measurement failed: %s\n", row.name.c_str(), row.measure_error.c_str());
    }
  }

  // The "why": the pick, the rules, and the model's opinion among the allowed algorithms.
  Result<const internal::AlgorithmInfo*> pick = internal::SelectAlgorithm(shape, "");
  if (!pick.ok()) {
    std::printf("selection: %s\n", pick.status().message().c_str());
    return kExitFailed;
  }
  const internal::AlgorithmInfo& chosen = **pick;
  std::string allowed;
  const Row* cheapest = nullptr;
  for (const Row& row : rows) {
    if (!row.allowed) continue;
    allowed += (allowed.empty() ? "" : ", ") + row.name;
    if (cheapest == nullptr || row.predicted_s < cheapest->predicted_s) {
      cheapest = &row;
    }
  }
  std::printf("selector picks %s: %s\n", std::string(chosen.name).c_str(),
              std::string(chosen.description).c_str());
  const double chosen_s = internal::PredictedSeconds(chosen, shape);
  if (cheapest != nullptr && cheapest->name == chosen.name) {
    std::printf(
        "  why: its rule \"%s\" allows this shape, and of the allowed algorithms (%s) "
        "the model predicts it fastest, %s us\n",
        std::string(chosen.rule).c_str(), allowed.c_str(), Micros(chosen_s).c_str());
  } else if (cheapest != nullptr) {
    std::printf(
        "  its rule \"%s\" allows this shape; of the allowed algorithms (%s) the model "
        "predicts %s fastest, %s us against %s us\n",
        std::string(chosen.rule).c_str(), allowed.c_str(), cheapest->name.c_str(),
        Micros(cheapest->predicted_s).c_str(), Micros(chosen_s).c_str());
  }
  for (const Row& row : rows) {
    if (!row.allowed) {
      std::printf("  %s is ruled out: its rule is \"%s\"\n", row.name.c_str(),
                  std::string(row.info->rule).c_str());
    }
  }
  if (const char* env = std::getenv("CHORUS_ALGO"); env != nullptr && *env != '\0') {
    std::printf(
        "  note: CHORUS_ALGO=%s is set; communicators created from the environment run "
        "that instead\n",
        env);
  }
  return 0;
}

}  // namespace

void AddModelCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ModelFlags>();
  CLI::App* sub = app.add_subcommand(
      "model",
      "Print each algorithm's predicted time (calibrated cost model), its measured time, and "
      "the algorithm the selection picks, for one collective shape");
  sub->add_option("--op", flags->op, "collective: " + BenchOpNames(true))
      ->capture_default_str();
  sub->add_option("-n,--ranks", flags->ranks, "ranks")->capture_default_str();
  sub->add_option("-b,--bytes", flags->bytes,
                  "total buffer bytes, as chorus bench counts them (the larger of a call's "
                  "buffers: all-reduce buffer, reduce-scatter input, all-gather output); K, M, G "
                  "are powers of 1024")
      ->capture_default_str();
  sub->add_option("-t,--transport", flags->transport, "thread, shm or tcp")->capture_default_str();
  sub->add_flag("--measure,!--no-measure", flags->measure,
                "time each algorithm with chorus bench (default), or only predict");
  sub->add_option("--iters", flags->iters, "timed calls per algorithm")->capture_default_str();
  sub->add_option("--counts", flags->counts,
                  "a v-collective's block lengths in elements, comma-separated (-n of them; "
                  "alltoallv: -n, each rank sending counts[q] to rank q, or -n * -n, row i rank "
                  "i's send_counts): print each rank's bytes, the model's beside the counters' "
                  "after a call on thread ranks, instead of times")
      ->delimiter(',');
  sub->add_flag("--per-rank", flags->per_rank,
                "print each rank's bytes under every algorithm, the model's beside the counters' "
                "after one call on thread ranks (exit 1 if any differ), instead of times");
  sub->add_option("--root", flags->root, "the root of a rooted collective (--per-rank, --counts)")
      ->capture_default_str();
  sub->footer(
      "Predictions use the tuning file ($CHORUS_TUNING_FILE, $XDG_CONFIG_HOME/chorus/tuning.conf "
      "or ~/.config/chorus/tuning.conf, written by chorus tune) or the built-in defaults.\n"
      "Exit status: 0 ok, 1 the tuning file is malformed or the selection failed, 2 bad "
      "arguments.");
  sub->callback([flags, &exit_code] { exit_code = RunModel(*flags); });
}

}  // namespace chorus::cli
