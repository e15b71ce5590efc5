// Test helper: what /proc/<pid>/stat says of a process ("pid (comm) state ppid ..."), for tests
// that wait for a process to stop, sleep or appear.
#pragma once

#include <sys/types.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

namespace chorus::testing {

// comm may hold spaces and parentheses, so the fields after it are found from the last ')'.
struct ProcStat {
  std::string comm;
  char state = '?';  // R running, S asleep, T stopped, Z zombie, ...
  pid_t ppid = 0;
};

// Empty once the process is gone (or before /proc shows it).
inline std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  const size_t open = line.find('(');
  const size_t close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 >= line.size()) {
    return std::nullopt;
  }
  return ProcStat{.comm = line.substr(open + 1, close - open - 1),
                  .state = line[close + 2],
                  .ppid = std::atoi(line.c_str() + close + 4)};
}

// The state letter of process `pid`, or '?' when it cannot be read.
inline char ProcessState(pid_t pid) {
  const std::optional<ProcStat> stat = ReadProcStat(pid);
  return stat ? stat->state : '?';
}

}  // namespace chorus::testing
