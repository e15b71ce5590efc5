// The group notices of the MPI transport (failures, rejections, census probes and answers):
// their tag and their one fixed-size message. Shared by mpi_transport.cpp, which posts the
// receive of the next notice, and mpi_notices.cpp, which sends and reads them.
// Thread safety: a plain struct.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "chorus/status.h"
#include "transport/census.h"
#include "transport/mpi/mpi_transport.h"

namespace chorus::internal {

// Tags on the private duplicate: data (kDataTag, mpi_transport.cpp) and group notices never
// match each other.
inline constexpr int kNoticeTag = 0x6302;

struct MpiTransport::Notice {
  static constexpr uint32_t kFailure = 1;
  static constexpr uint32_t kRejection = 2;
  static constexpr uint32_t kProbe = 3;   // a census asks about call_index
  static constexpr uint32_t kAnswer = 4;  // the state of its sender, about call_index

  uint32_t kind = 0;
  int32_t code = 0;         // a failure's StatusCode
  uint64_t call_index = 0;  // the rejected call, or the census's
  // An answer's state (census.h's PeerState).
  uint64_t started = 0;
  int64_t active = -1;
  int64_t idle_ms = -1;
  int32_t waiting_for = -1;
  uint32_t failed = 0;
  // The call the answering rank is in, as Beacon::call's words, when has_call.
  uint64_t has_call = 0;
  uint64_t call_words[Beacon::kCallWords] = {};
  char text[424] = {};  // NUL-terminated; longer texts are cut

  Notice() = default;
  Notice(uint32_t k, StatusCode c, uint64_t call, const std::string& message)
      : kind(k), code(static_cast<int32_t>(c)), call_index(call) {
    std::memcpy(text, message.data(), std::min(message.size(), sizeof(text) - 1));
  }
  std::string message() const { return std::string(text, strnlen(text, sizeof(text))); }
};

}  // namespace chorus::internal
