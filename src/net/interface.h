// Interface choice: the IPv4 address a process listens on, from an interface's name or, with
// none named, the first interface that is up and not loopback. Used by Create (the TCP ranks'
// listening address) and `chorus launch` (the store's address for ranks on other hosts).
//
//   Result<std::optional<std::string>> a = InterfaceIpv4("eth0");   // "10.0.0.2", or nullopt
//   Result<std::optional<std::string>> b = InterfaceIpv4("");       // first up, non-loopback
//
// Thread safety: safe from any thread (getifaddrs allocates its own list).
#pragma once

#include <optional>
#include <string>

#include "chorus/status.h"

namespace chorus::internal {

// The first IPv4 address of the interface called `name` that is up, or (name empty) of the first
// interface that is up and is not loopback; nullopt when there is none. An error only when the
// interfaces cannot be listed.
[[nodiscard]] Result<std::optional<std::string>> InterfaceIpv4(const std::string& name);

}  // namespace chorus::internal
