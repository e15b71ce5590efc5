// job.cpp: the launcher's once-per-job decisions (job.h).
#include "launch/job.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "launch/plan.h"
#include "launch/sys.h"
#include "net/auth.h"

namespace chorus::cli::launch {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

Resolved ResolveProgram(const std::string& prog) {
  if (prog.find('/') != std::string::npos) {
    if (IsExecutableFile(prog)) return {.path = prog};
    struct stat st {};
    if (::stat(prog.c_str(), &st) != 0) {
      return {.exit_code = kExitNotFound, .error = prog + ": " + ErrnoText(errno)};
    }
    return {.exit_code = kExitNotExecutable,
            .error = prog + (S_ISDIR(st.st_mode) ? ": is a directory" : ": permission denied")};
  }
  const char* path_env = std::getenv("PATH");
  std::string_view dirs = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  bool found_unexecutable = false;
  while (true) {
    size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string candidate = (dir.empty() ? "." : dir) + "/" + prog;  // empty entry: cwd
    if (IsExecutableFile(candidate)) return {.path = candidate};
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) found_unexecutable = true;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  if (found_unexecutable) {
    return {.exit_code = kExitNotExecutable, .error = prog + ": permission denied"};
  }
  return {.exit_code = kExitNotFound, .error = prog + ": command not found"};
}

Result<std::string> MakeJobId() {
  UniqueFd fd(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!fd) return Unavailable("cannot open /dev/urandom: " + ErrnoText(errno));
  std::array<unsigned char, 8> bytes{};
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable("cannot read /dev/urandom: " + ErrnoText(errno));
    got += static_cast<size_t>(n);
  }
  std::string id;
  for (unsigned char b : bytes) {
    constexpr char kHex[] = "0123456789abcdef";
    id += kHex[b >> 4];
    id += kHex[b & 0xf];
  }
  return id;
}

Result<std::string> StoreAddress(const std::string& flag, bool multi_host) {
  if (flag.empty() && !multi_host) return std::string("127.0.0.1");
  in_addr parsed{};
  if (!flag.empty() && ::inet_pton(AF_INET, flag.c_str(), &parsed) == 1) {
    if (parsed.s_addr == htonl(INADDR_ANY)) {
      return InvalidArgument(
          "--store-host 0.0.0.0: the ranks need one address to dial; name "
          "the interface they reach this host on");
    }
    return flag;
  }
  Result<std::optional<std::string>> found = InterfaceIpv4(flag);
  if (!found.ok()) return found.status();
  if (*found) return **found;
  if (flag.empty()) {
    return Unavailable(
        "no IPv4 interface other than loopback is up for the store; name one "
        "with --store-host");
  }
  return InvalidArgument("--store-host " + flag +
                         ": not an IPv4 address, nor an interface of this host with one");
}

std::optional<std::string> NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

Result<JobSecret> DecideSecret() {
  if (std::optional<std::string> text = NonEmptyEnv("CHORUS_SECRET")) return JobSecret{*text};
  if (std::optional<std::string> path = NonEmptyEnv("CHORUS_SECRET_FILE")) {
    Result<std::string> text = internal::ReadSecretFile(*path);
    if (!text.ok()) return text.status();
    return JobSecret{std::move(text).value()};
  }
  return JobSecret{internal::Secret::Generate(), true};
}

}  // namespace chorus::cli::launch
