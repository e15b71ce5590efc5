// Bootstrap through a file that names rank 0's store (see bootstrap.h).
#include "rendezvous/bootstrap.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/errno_text.h"
#include "net/auth.h"

namespace chorus::internal {
namespace {

std::string PathOf(const std::string& url) {
  const std::string rest = url.substr(sizeof(kBootstrapScheme) - 1);
  const size_t slash = rest.find('/');
  return slash == std::string::npos ? "" : rest.substr(slash);
}

Status Publish(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Unavailable("Create: cannot write the bootstrap file " + temp + ": " +
                       internal::ErrnoText(errno) + " (set CHORUS_BOOTSTRAP_DIR or CHORUS_STORE)");
  }
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok || rename(temp.c_str(), path.c_str()) != 0) {
    unlink(temp.c_str());
    return Unavailable("Create: cannot publish the bootstrap file " + path + ": " +
                       internal::ErrnoText(errno));
  }
  return Status::Ok();
}

}  // namespace

std::string BootstrapHost(const std::string& url) {
  const std::string rest = url.substr(sizeof(kBootstrapScheme) - 1);
  return rest.substr(0, rest.find('/'));
}

Result<Bootstrapped> Bootstrap(const std::string& url, int rank, const std::string& secret,
                               const std::string& bind_host, Deadline deadline) {
  const std::string path = PathOf(url);
  if (path.empty()) return InvalidArgument("Create: bad bootstrap URL \"" + url + "\"");
  Bootstrapped b;
  if (rank == 0) {
    b.secret = secret.empty() ? Secret::Generate() : secret;
    auto server = TcpStoreServer::Start({.host = bind_host, .port = 0, .secret = b.secret});
    if (!server.ok()) return server.status();
    b.server = std::move(server).value();
    CHORUS_RETURN_IF_ERROR(
        Publish(path, b.server->url() + "\n" + (secret.empty() ? b.secret : "") + "\n"));
    auto store =
        OpenStore(b.server->url(), {.connect_timeout = Remaining(deadline), .secret = b.secret});
    if (!store.ok()) return store.status();
    b.store = std::move(store).value();
    return b;
  }
  // The file may be missing (rank 0 is not there yet) or stale (an earlier job's): retry until
  // its store answers.
  std::string last_error = "the file " + path + " does not exist yet";
  while (Clock::now() < deadline) {
    std::ifstream in(path);
    std::string store_url;
    std::string fresh_secret;
    if (in && std::getline(in, store_url) && std::getline(in, fresh_secret)) {
      b.secret = secret.empty() ? fresh_secret : secret;
      auto store = OpenStore(store_url, {.connect_timeout = std::min<std::chrono::milliseconds>(
                                             Remaining(deadline), std::chrono::seconds(2)),
                                         .secret = b.secret});
      if (store.ok()) {
        b.store = std::move(store).value();
        return b;
      }
      last_error = store.status().message();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return DeadlineExceeded("Create: rank " + std::to_string(rank) +
                          " found no store through the bootstrap file (" + last_error +
                          "); is rank 0 running, and is the directory shared by every host?");
}

void FinishBootstrap(const std::string& url) { unlink(PathOf(url).c_str()); }

}  // namespace chorus::internal
