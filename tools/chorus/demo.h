// demo.h: what the two halves of `chorus demo` share: the lesson run on every rank (demo.cpp)
// and rank 0's last steps, the ownership table, the JSON record and the plots (demo_output.cpp).
//
// Thread safety: a DemoRecord is rank 0's alone; the functions are called from one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::cli::demo {

inline constexpr int kWarmupReps = 100;
inline constexpr int kExitFailed = 1;

struct DemoFlags {
  std::string transport = "thread";
  int ranks = 4;
  int count = 8;
  std::string dtype = "float32";
  int reps = 2000;
  std::string json_path;
  std::string plot_dir;
  int timeout_ms = 10000;
  bool rank_worker = false;  // internal: this process is one rank under chorus launch
};

// What the run observed, as rank 0 sees it; the order of the arrays is all-reduce,
// reduce-scatter, then gather.
struct DemoRecord {
  int ranks = 0;
  TransportKind transport = TransportKind::kThread;
  std::array<size_t, 3> shapes{};
  std::array<uint64_t, 3> modeled_bytes{};      // third: reduce-scatter + all-gather
  std::array<uint64_t, 3> measured_bytes{};     // third: reduce-scatter + all-gather
  std::array<double, 3> latency_us{};           // third: the all-gather alone
  std::vector<std::vector<std::string>> table;  // rows of the ownership table
  std::string stdout_text;
  std::vector<std::string> failed_checks;
};

// Prints a line of the lesson to stdout and keeps it for the record.
void Emit(DemoRecord& rec, const std::string& line);

// Python's repr of a float: shortest round-trip digits, scientific below 1e-4 and from 1e16.
std::string PyFloat(double v);

template <typename T>
std::string ListString(const std::vector<T>& values) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  os << ']';
  return os.str();
}

// `s` with the name of the step that failed in front.
Status InStep(const char* step, const Status& s);
// Reports a failed run; returns the exit status.
int Fail(const Status& s);

// Rank 0's last steps (demo_output.cpp): the ownership table, the verdict, the record and the
// plots. Returns the exit status.
int Finish(const DemoFlags& flags, const CommOptions& options, DemoRecord& rec);

}  // namespace chorus::cli::demo
