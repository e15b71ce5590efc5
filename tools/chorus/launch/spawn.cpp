// spawn.cpp: starting one rank of `chorus launch` (spawn.h).
#include "launch/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string_view>
#include <utility>

#include "launch/sys.h"

extern char** environ;  // NOLINT: the ranks inherit the launcher's environment

namespace chorus::cli::launch {
namespace {

std::vector<char*> PointersTo(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// The argv and envp of a rank, prepared before fork().
struct ExecArgs {
  std::vector<std::string> args;
  std::vector<char*> argv;
  std::vector<std::string> sh_args;  // "/bin/sh path args...", for scripts without a #! line
  std::vector<char*> sh_argv;
  std::vector<std::string> env;
  std::vector<char*> envp;
  bool bind = false;  // set `cpus` as the rank's affinity before exec
  cpu_set_t cpus{};
};

// Child side of fork(); never returns.
[[noreturn]] void ExecRank(const ExecPlan& plan, const ExecArgs& exec, int in_fd, int out_fd,
                           int err_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died between fork() and prctl(); then nobody would kill this rank.
  if (::getppid() != plan.launcher) ::_exit(kExitLauncherFailed);
  ::dup2(in_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  // A blocked signal mask and an ignored SIGPIPE would both survive exec: undo the launcher's.
  ::sigaction(SIGPIPE, &plan.original_sigpipe, nullptr);
  ::sigprocmask(SIG_SETMASK, &plan.original_mask, nullptr);
  // Best effort, like mpirun's binding: a rank that cannot be bound still runs.
  if (exec.bind) ::sched_setaffinity(0, sizeof exec.cpus, &exec.cpus);
  ::execve(plan.path.c_str(), exec.argv.data(), exec.envp.data());
  if (errno == ENOEXEC) ::execve("/bin/sh", exec.sh_argv.data(), exec.envp.data());
  int err = errno;
  // strerror() may lock (translations); strerrorname_np() reads a constant table.
  const char* parts[] = {"chorus launch: cannot execute ", plan.path.c_str(), ": ",
                         strerrorname_np(err) != nullptr ? strerrorname_np(err) : "error", "\n"};
  for (const char* part : parts) {
    if (::write(STDERR_FILENO, part, std::strlen(part)) < 0) break;
  }
  ::_exit(err == ENOENT ? kExitNotFound : kExitNotExecutable);
}

Result<UniqueFd> SetNonBlocking(UniqueFd fd) {
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) < 0) {
    return Unavailable("fcntl: " + ErrnoText(errno));
  }
  return fd;
}

struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

Result<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Unavailable("pipe: " + ErrnoText(errno));
  Pipe pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
  Result<UniqueFd> read_end = SetNonBlocking(std::move(pipe.read_end));
  if (!read_end.ok()) return read_end.status();
  pipe.read_end = std::move(*read_end);
  return pipe;
}

ExecArgs PrepareExec(const ExecPlan& plan, const RankCommand& command) {
  ExecArgs exec;
  exec.args = command.args;
  exec.argv = PointersTo(exec.args);
  exec.sh_args = {"/bin/sh", plan.path};
  exec.sh_args.insert(exec.sh_args.end(), command.args.begin() + 1, command.args.end());
  exec.sh_argv = PointersTo(exec.sh_args);
  std::set<std::string_view> replaced;
  for (const std::string& kv : command.env)
    replaced.insert(std::string_view(kv).substr(0, kv.find('=')));
  for (const std::string& kv : plan.base_env) {
    if (replaced.count(std::string_view(kv).substr(0, kv.find('='))) == 0) exec.env.push_back(kv);
  }
  exec.env.insert(exec.env.end(), command.env.begin(), command.env.end());
  exec.envp = PointersTo(exec.env);
  if (command.cpu >= 0) {
    exec.bind = true;
    CPU_ZERO(&exec.cpus);
    CPU_SET(command.cpu, &exec.cpus);
  }
  return exec;
}

// A pipe that holds `line` and then reports end of file; the read end is returned.
Result<UniqueFd> PipeHolding(const std::string& line) {
  // Written before the rank starts, so it must fit in the pipe: 4 KiB always does.
  if (line.size() > 4096) return Unavailable("the secret is too long to pass on stdin (> 4 KiB)");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Unavailable("pipe: " + ErrnoText(errno));
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  if (::write(write_end.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return Unavailable("cannot write the rank's stdin: " + ErrnoText(errno));
  }
  return read_end;
}

}  // namespace

std::vector<std::string> BaseEnvironment() {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    std::string_view name = kv.substr(0, kv.find('='));
    bool ours = false;
    for (const char* var : kRankVariables) ours = ours || name == var;
    if (!ours) env.emplace_back(kv);
  }
  return env;
}

Status SpawnRank(const ExecPlan& plan, const RankCommand& command, bool prefix, Child& child) {
  Result<Pipe> out = MakePipe();
  if (!out.ok()) return out.status();
  Result<Pipe> err = MakePipe();
  if (!err.ok()) return err.status();
  UniqueFd stdin_pipe;
  if (!command.stdin_line.empty()) {
    Result<UniqueFd> in = PipeHolding(command.stdin_line);
    if (!in.ok()) return in.status();
    stdin_pipe = std::move(*in);
  }
  const int in_fd = stdin_pipe ? stdin_pipe.get() : plan.dev_null;
  const ExecArgs exec = PrepareExec(plan, command);

  pid_t pid = ::fork();
  if (pid < 0) return Unavailable("fork: " + ErrnoText(errno));
  if (pid == 0) ExecRank(plan, exec, in_fd, out->write_end.get(), err->write_end.get());
  // Also set the group from this side: whichever of the two runs first, the group exists before
  // the launcher could signal it.
  ::setpgid(pid, pid);
  child.pid = pid;
  child.running = true;
  std::string tag = prefix ? "[" + std::to_string(child.rank) + "] " : "";
  // The write ends close here: once the rank and its children are gone, the pipes report EOF.
  child.out = std::make_unique<OutputStream>(std::move(out->read_end), STDOUT_FILENO, tag);
  child.err = std::make_unique<OutputStream>(std::move(err->read_end), STDERR_FILENO, tag);
  return Status::Ok();
}

}  // namespace chorus::cli::launch
