// The TCP transport's wire format: every frame starts with a fixed 64-byte header that the
// receiver validates before it reads a byte of payload.
//
//   offset  field
//    0      magic u32 "CHRF"
//    4      version u16
//    6      FrameType u16
//    8      communicator id u64   (random per communicator, from rank 0 through the store)
//   16      sequence u64          (frames sent on this connection before this one)
//   24      call index u64         | the collective's fingerprint (CallTag): a receiver proves
//   32      count u64              | the sender runs the same call with the same arguments
//   40      kind, dtype, op,       |
//           algorithm u8 x 4       |
//   44      root u32               |
//   48      payload length u64
//   56      layout u64             (CallTag::layout: a v-collective's counts)
//
// Integers are big-endian. A data frame's payload is one segment, at most the receiver's slot;
// a longer one is refused before any of it is read, never written past the slot. Control
// frames carry the group's failure (kFail), a rank's refusal of a call (kReject), and the
// census of a rank that timed out (kProbe, answered by the peer's progress thread with
// kProbeReply) as text.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "chorus/status.h"
#include "transport/transport.h"

namespace chorus::internal::tcp {

inline constexpr uint32_t kFrameMagic = 0x43485246;  // "CHRF"
inline constexpr uint16_t kFrameVersion = 2;
inline constexpr size_t kFrameHeaderBytes = 64;
// Longest control payload (failure or rejection text).
inline constexpr size_t kMaxControlBytes = 4096;

enum class FrameType : uint16_t {
  kData = 1,    // one segment of a collective
  kFail = 2,    // payload: status code u32 | message; the group failed
  kReject = 3,  // payload: message; the sender refused call `tag.call_index`
  kProbe = 4,   // no payload: "where are you?", from a rank that timed out in `tag.call_index`
  // payload: "started in_call waiting_for idle_ms failed [w0 w1 w2 w3]" for `tag.call_index`,
  // the words being the call the peer is in (transport/call_tag.h: PackTag), when it shows one
  kProbeReply = 5,
};

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint64_t comm_id = 0;
  uint64_t sequence = 0;
  CallTag tag;
  uint64_t length = 0;
};

// What the receiver of a connection expects of the next frame.
struct FrameExpectation {
  uint64_t comm_id = 0;
  uint64_t sequence = 0;
  uint64_t max_data_bytes = 0;  // the receiver's slot
};

void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]);

// Decodes and checks a header: magic, version, type, communicator id, sequence, zero fields,
// the tag's enums and the length (data: at most max_data_bytes; control: at most
// kMaxControlBytes). The error says which field was wrong and how ("frame from rank 3: payload
// of 2097152 bytes exceeds the 1048576-byte slot").
Status DecodeFrameHeader(const uint8_t bytes[kFrameHeaderBytes], const FrameExpectation& expect,
                         FrameHeader* header);

}  // namespace chorus::internal::tcp
