// Interface choice (see interface.h).
#include "net/interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "base/errno_text.h"

namespace chorus::internal {

Result<std::optional<std::string>> InterfaceIpv4(const std::string& name) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return Unavailable("getifaddrs: " + ErrnoText(errno));
  const std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> owner(list, ::freeifaddrs);
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0) continue;
    const bool wanted = name.empty() ? (i->ifa_flags & IFF_LOOPBACK) == 0 : name == i->ifa_name;
    if (!wanted) continue;
    sockaddr_in address{};
    std::memcpy(&address, i->ifa_addr, sizeof(address));
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &address.sin_addr, text, sizeof(text));
    return std::optional<std::string>(text);
  }
  return std::optional<std::string>();
}

}  // namespace chorus::internal
