// errno as text, for error messages: "Connection refused". strerror() may use a shared buffer
// and locale data, so a thread (the TCP progress thread, the store's server) cannot call it
// while another does; strerrordesc_np() reads a constant table.
//
//   return Unavailable("connect: " + ErrnoText(errno));
//
// Thread safety: safe from any thread.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

namespace chorus::internal {

inline std::string ErrnoText(int err) {
  const char* text = strerrordesc_np(err);
  return text != nullptr ? std::string(text) : "errno " + std::to_string(err);
}

// "what: <errno as text>", for the call that just failed: Errno("bind").
inline std::string Errno(const char* what) { return std::string(what) + ": " + ErrnoText(errno); }

}  // namespace chorus::internal
