// bench_child.h: runs `chorus bench --csv ...` as a child of this program and returns its rows,
// so that `chorus tune` and `chorus model` time collectives exactly as `chorus bench` does (the
// same rank runners, launcher, barriers, iteration counts and median over the slowest rank)
// without a second copy of that machinery. Thread ranks run inside the child; shm and tcp ranks
// are the child's own `chorus launch` job.
//
//   Result<BenchChildOutput> out = RunBenchChild({"--transport", "shm", "-n", "2",
//                                                 "--op", "allgather", "--algo", "ring",
//                                                 "--sizes", "64,1M"});
//   for (const BenchCsvRow& row : out->rows) ... row.bytes, row.median_us ...
//
// The child's stdout and stderr are both captured: lines that parse as CSV rows become `rows`,
// everything else is kept in `other_lines` (warnings, and the error when the child fails).
// Thread safety: call from one thread at a time (it forks).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::cli {

struct BenchCsvRow {
  std::string op;
  int ranks = 0;
  size_t count = 0;  // total buffer, elements
  size_t bytes = 0;  // total buffer
  double median_us = 0;
  double min_us = 0;
};

struct BenchChildOutput {
  std::vector<BenchCsvRow> rows;
  std::vector<std::string> other_lines;
};

// Runs `<this program> bench --csv --lib chorus <bench_args...>` and waits for it. A child that
// exits with a non-zero status (or is killed) is an error quoting its last non-CSV line.
Result<BenchChildOutput> RunBenchChild(const std::vector<std::string>& bench_args);

// One line of `chorus bench --csv` output (lib,op,ranks,count,bytes,median_us,min_us,...);
// false when the line is not such a row.
bool ParseBenchCsvRow(const std::string& line, BenchCsvRow& row);

}  // namespace chorus::cli
