// output.h: the launcher's end of a rank's stdout or stderr pipe. It reads what the rank wrote
// and copies it, cut into whole prefixed lines (line_splitter.h), to the launcher's stream of
// the same name. Made by SpawnRank (spawn.h), pumped by the supervisor (supervisor.h).
//
// Thread safety: one owner; the launcher's one thread pumps every stream.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "launch/line_splitter.h"
#include "launch/sys.h"

namespace chorus::cli::launch {

// How much one read() of a rank's pipe takes.
inline constexpr size_t kReadChunk = 64 * 1024;

// The launcher's end of one of a rank's output pipes.
struct OutputStream {
  OutputStream(UniqueFd read_end, int sink_fd, std::string prefix)
      : fd(std::move(read_end)), sink(sink_fd), lines(std::move(prefix)) {}

  // Reads what is available (at most `limit` bytes) and writes the completed lines to `sink`.
  // Closes the stream at end of file or on a read error.
  void Pump(size_t limit);

  // The launcher is done: flush the unterminated tail even if a straggler holds the pipe open.
  void Close();

  UniqueFd fd;  // non-blocking read end
  int sink;     // STDOUT_FILENO or STDERR_FILENO
  LineSplitter lines;
};

}  // namespace chorus::cli::launch
