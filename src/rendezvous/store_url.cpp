// OpenStore: turns a store URL into a store.
//
//   tcp://host:port        a TcpStore; host is a name, an IPv4 address or [an IPv6 address]
//   file:///abs/path       a FileStore; the directory is created when missing
//
// Parsing is strict and every rejection names the URL and what is wrong with it, because the
// URL usually comes from a launcher's environment and a typo there should not surface as a
// 30-second connection timeout. Percent-escapes in file paths are not decoded.
#include "rendezvous/store_internal.h"

namespace chorus {
namespace {

Status BadUrl(const std::string& url, const std::string& why) {
  return InvalidArgument("store URL \"" + url + "\": " + why);
}

}  // namespace

Result<std::shared_ptr<Store>> OpenStore(const std::string& url, const StoreOptions& options) {
  if (options.connect_timeout.count() < 0) {
    return BadUrl(url, "negative connect_timeout (" +
                           std::to_string(options.connect_timeout.count()) + " ms)");
  }
  const size_t sep = url.find("://");
  if (sep == std::string::npos) {
    return BadUrl(url, "expected tcp://host:port or file:///absolute/path");
  }
  const std::string scheme = url.substr(0, sep);
  const std::string rest = url.substr(sep + 3);

  if (scheme == "file") {
    if (rest.empty() || rest[0] != '/') {
      return BadUrl(url,
                    "a file URL needs an empty host and an absolute path, as in file:///tmp/job");
    }
    return internal::OpenFileStore(rest);
  }

  if (scheme == "tcp") {
    std::string host;
    std::string port_text;
    if (!rest.empty() && rest[0] == '[') {
      const size_t close = rest.find(']');
      if (close == std::string::npos) return BadUrl(url, "'[' without ']' around the host");
      host = rest.substr(1, close - 1);
      if (close + 1 >= rest.size() || rest[close + 1] != ':') {
        return BadUrl(url, "missing \":port\" after the host");
      }
      port_text = rest.substr(close + 2);
    } else {
      const size_t colon = rest.rfind(':');
      if (colon == std::string::npos) return BadUrl(url, "missing \":port\" after the host");
      host = rest.substr(0, colon);
      port_text = rest.substr(colon + 1);
      if (host.find(':') != std::string::npos) {
        return BadUrl(url, "an IPv6 host needs brackets, as in tcp://[::1]:29500");
      }
    }
    if (host.empty()) return BadUrl(url, "empty host");
    if (host.find_first_of("/?#@ ") != std::string::npos) {
      return BadUrl(url, "host \"" + host + "\" contains a character a host cannot have");
    }
    uint32_t port = 0;
    const bool digits = !port_text.empty() && port_text.size() <= 5 &&
                        port_text.find_first_not_of("0123456789") == std::string::npos;
    if (digits) port = static_cast<uint32_t>(std::stoul(port_text));
    if (!digits || port == 0 || port > 65535) {
      return BadUrl(url, "port \"" + port_text + "\" is not a number from 1 to 65535");
    }
    return internal::OpenTcpStore(host, static_cast<uint16_t>(port), options);
  }

  return BadUrl(url, "unknown scheme \"" + scheme + "\" (expected tcp or file)");
}

}  // namespace chorus
