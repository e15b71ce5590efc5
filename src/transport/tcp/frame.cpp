// Frame header encoding and validation (see frame.h for the layout).
#include "transport/tcp/frame.h"

#include <string>

#include "base/bytes.h"
#include "base/collectives.h"

namespace chorus::internal::tcp {
namespace {

Status Bad(const std::string& what) { return InvalidArgument("bad frame: " + what); }

}  // namespace

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  PutU32(out + 0, kFrameMagic);
  PutU16(out + 4, kFrameVersion);
  PutU16(out + 6, static_cast<uint16_t>(h.type));
  PutU64(out + 8, h.comm_id);
  PutU64(out + 16, h.sequence);
  PutU64(out + 24, h.tag.call_index);
  PutU64(out + 32, h.tag.count);
  out[40] = static_cast<uint8_t>(h.tag.kind);
  out[41] = static_cast<uint8_t>(h.tag.dtype);
  out[42] = static_cast<uint8_t>(h.tag.op);
  out[43] = h.tag.algorithm;
  PutU32(out + 44, h.tag.root);
  PutU64(out + 48, h.length);
  PutU64(out + 56, h.tag.layout);
}

Status DecodeFrameHeader(const uint8_t bytes[kFrameHeaderBytes], const FrameExpectation& expect,
                         FrameHeader* h) {
  if (GetU32(bytes) != kFrameMagic) return Bad("wrong magic (not a chorus peer?)");
  if (GetU16(bytes + 4) != kFrameVersion) {
    return Bad("protocol version " + std::to_string(GetU16(bytes + 4)) + ", expected " +
               std::to_string(kFrameVersion));
  }
  const uint16_t type = GetU16(bytes + 6);
  if (type < static_cast<uint16_t>(FrameType::kData) ||
      type > static_cast<uint16_t>(FrameType::kProbeReply)) {
    return Bad("unknown frame type " + std::to_string(type));
  }
  h->type = static_cast<FrameType>(type);
  h->comm_id = GetU64(bytes + 8);
  if (h->comm_id != expect.comm_id) return Bad("it belongs to another communicator");
  h->sequence = GetU64(bytes + 16);
  if (h->sequence != expect.sequence) {
    return Bad("sequence number " + std::to_string(h->sequence) + ", expected " +
               std::to_string(expect.sequence));
  }
  if (!IsCollective(bytes[40]) || bytes[41] >= kNumDataTypes || bytes[42] >= kNumReduceOps) {
    return Bad("unknown collective, data type or operation");
  }
  h->tag.call_index = GetU64(bytes + 24);
  h->tag.count = GetU64(bytes + 32);
  h->tag.kind = static_cast<CollectiveKind>(bytes[40]);
  h->tag.dtype = static_cast<DataType>(bytes[41]);
  h->tag.op = static_cast<ReduceOp>(bytes[42]);
  h->tag.algorithm = bytes[43];
  h->tag.root = GetU32(bytes + 44);
  h->length = GetU64(bytes + 48);
  h->tag.layout = GetU64(bytes + 56);
  const uint64_t limit =
      h->type == FrameType::kData ? expect.max_data_bytes : uint64_t{kMaxControlBytes};
  if (h->length > limit) {
    return Bad("payload of " + std::to_string(h->length) + " bytes exceeds the " +
               std::to_string(limit) + "-byte limit");
  }
  return Status::Ok();
}

}  // namespace chorus::internal::tcp
