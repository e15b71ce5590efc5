// line_splitter.h: cuts a rank's output into whole lines behind its "[r] " prefix, for the
// launcher's OutputStream (output.h). Pure: bytes in, text out; tests/launch_plan_test.cpp tests
// it.
//
// Thread safety: a value type; one owner.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace chorus::cli::launch {

// A rank that never writes '\n' must not make the launcher buffer without bound: a longer line
// is cut into pieces of this size, each printed as a line of its own.
inline constexpr size_t kMaxLineBytes = 64 * 1024;

// Cuts a byte stream into lines and renders each one whole behind a prefix.
class LineSplitter {
 public:
  explicit LineSplitter(std::string prefix) : prefix_(std::move(prefix)) {}

  // Appends every line that `data` completes to `out`; keeps the unfinished tail.
  void Feed(std::string_view data, std::string& out);

  // End of stream: an unterminated last line still comes out, with a '\n'.
  void Finish(std::string& out);

 private:
  void EmitPartial(std::string& out);

  std::string prefix_;
  std::string partial_;
};

}  // namespace chorus::cli::launch
