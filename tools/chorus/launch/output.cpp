// output.cpp: OutputStream (output.h).
#include "launch/output.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <string_view>

namespace chorus::cli::launch {

void OutputStream::Pump(size_t limit) {
  std::string out;
  std::array<char, kReadChunk> buffer;
  size_t total = 0;
  while (fd && total < limit) {
    ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n > 0) {
      lines.Feed(std::string_view(buffer.data(), static_cast<size_t>(n)), out);
      total += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      break;
    } else {  // EOF, or an error that will not go away
      lines.Finish(out);
      fd.Reset();
    }
  }
  WriteAll(sink, out);
}

void OutputStream::Close() {
  std::string out;
  lines.Finish(out);
  WriteAll(sink, out);
  fd.Reset();
}

}  // namespace chorus::cli::launch
