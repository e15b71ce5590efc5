// sys.h: the small OS helpers of `chorus launch`: an owned file descriptor, errno text, whole
// writes to stdout/stderr and the launcher's notes, the CPUs it may use, and the IPv4 address of
// a network interface (the one getifaddrs() use, kept apart so that it can move to a shared
// network library). Used by every part of the launcher but plan.h and line_splitter.h.
//
// Thread safety: the functions may be called from any thread; UniqueFd is a value type with one
// owner.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/errno_text.h"
#include "base/unique_fd.h"
#include "chorus/status.h"
#include "net/interface.h"

namespace chorus::cli::launch {

using internal::UniqueFd;

using internal::ErrnoText;

// Writes all of `data` to `fd`. Errors are dropped on purpose: when whoever reads our stdout has
// gone away (EPIPE), the job must still be supervised to its end.
void WriteAll(int fd, std::string_view data);

// "chorus launch: <message>" on stderr.
void Note(const std::string& message);

// "SIGTERM", or "signal N" for a signal without a name.
std::string SignalName(int sig);

// "1 rank", "2 ranks".
std::string Plural(size_t n, const char* word);

// The CPUs this process may run on, in order.
std::vector<int> UsableCpuList();

// A child's stdin/stdout/stderr are dup2()ed onto 0/1/2. Should the launcher have started with
// one of those closed, a pipe could land there and dup2 would silently keep its close-on-exec
// flag; occupying the slots with /dev/null first rules that out.
void EnsureStandardFdsOpen();

// The store's address on a named or the first up interface: the rule the TCP ranks listen by.
using internal::InterfaceIpv4;

}  // namespace chorus::cli::launch
