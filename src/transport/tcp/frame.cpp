// Frame header encoding and validation (see frame.h for the layout).
#include "transport/tcp/frame.h"

#include <string>

#include "base/collectives.h"

namespace chorus::internal::tcp {
namespace {

void PutU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}
uint16_t GetU16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

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
