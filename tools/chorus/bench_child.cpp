// Runs `chorus bench --csv` as a child process and collects its rows (see bench_child.h).
#include "bench_child.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "base/unique_fd.h"

namespace chorus::cli {
namespace {

std::vector<std::string_view> SplitCommas(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    fields.push_back(line.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) return fields;
    start = comma + 1;
  }
}

template <typename T>
bool ParseField(std::string_view text, T& value) {
  const char* end = text.data() + text.size();
  const std::from_chars_result r = std::from_chars(text.data(), end, value);
  return r.ec == std::errc() && r.ptr == end;
}

std::string ExitDescription(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "signal " + std::to_string(WTERMSIG(wait_status));
  return "wait status " + std::to_string(wait_status);
}

}  // namespace

bool ParseBenchCsvRow(const std::string& line, BenchCsvRow& row) {
  const std::vector<std::string_view> f = SplitCommas(line);
  if (f.size() != 9 || f[0] == "lib") return false;
  BenchCsvRow parsed;
  parsed.op = std::string(f[1]);
  if (!ParseField(f[2], parsed.ranks) || !ParseField(f[3], parsed.count) ||
      !ParseField(f[4], parsed.bytes) || !ParseField(f[5], parsed.median_us) ||
      !ParseField(f[6], parsed.min_us)) {
    return false;
  }
  row = parsed;
  return true;
}

Result<BenchChildOutput> RunBenchChild(const std::vector<std::string>& bench_args) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return Unavailable("cannot find this program in /proc/self/exe: " + ec.message());
  std::vector<std::string> args = {self, "bench", "--csv", "--lib", "chorus"};
  args.insert(args.end(), bench_args.begin(), bench_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return Unavailable(std::string("pipe: ") + std::strerror(errno));
  }
  internal::UniqueFd read_end(fds[0]);
  internal::UniqueFd write_end(fds[1]);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return Unavailable(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::dup2(write_end.get(), STDOUT_FILENO);
    ::dup2(write_end.get(), STDERR_FILENO);
    ::execv(self.c_str(), argv.data());
    _exit(127);
  }
  write_end.Reset();

  std::string text;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(read_end.get(), buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }

  BenchChildOutput out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    BenchCsvRow row;
    if (ParseBenchCsvRow(line, row)) {
      out.rows.push_back(std::move(row));
    } else if (!line.empty()) {
      out.other_lines.push_back(std::move(line));
    }
  }
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    std::string why = out.other_lines.empty() ? "no output" : out.other_lines.back();
    return Unavailable("chorus bench (" + ExitDescription(wait_status) + "): " + why);
  }
  return out;
}

}  // namespace chorus::cli
