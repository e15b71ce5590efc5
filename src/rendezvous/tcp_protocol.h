// The TcpStore wire protocol, shared by the client (tcp_store_client.cpp) and the server
// (tcp_store_server.h) and by tests that speak it by hand to see how the server treats a
// misbehaving peer.
//
// A connection goes through stages, each a separate step in the server:
//   1. hello     client -> server: magic u32 | version u16 | zero u16           (8 bytes)
//                server -> client: magic u32 | version u16 | HelloStatus u16    (8 bytes)
//                The magic comes first and is checked byte by byte as it arrives, so a
//                stranger (an HTTP probe, a port scanner) is dropped before any of its bytes
//                is read as a length. On a version mismatch the server answers with its own
//                version and kBadVersion, then closes.
//   2. auth      the four-message HMAC challenge-response of net/auth.h, the client
//                dialing with the claim "store". The server reads no request until the client
//                has proved it knows the job's secret; a client that fails, sends garbage or
//                has not finished hello and handshake within TcpStoreServer::Options::
//                handshake_timeout is closed without a word and logged on the server's stderr.
//                The client checks the server's proof first, so a server without the secret
//                never sees a request either.
//   3. requests  frames, each answered by exactly one response frame, in order.
//
// Frame: body length u32 (1 .. kMaxFrameBytes) | body. Integers are big-endian; a string is
// its length u32 followed by its bytes.
//   request body:  Op u8 | fields
//   response body: ReplyStatus u8 | payload, the payload running to the end of the frame.
//                  kError carries a message and leaves the connection usable (for example Add
//                  on a non-integer value).
//   kSet     key, value          -> ok
//   kGet     key, wait u8        -> ok value | missing   wait=1: parked until the key is set
//   kAdd     key, delta i64      -> ok sum i64 | error
//   kWait    n u32, n keys       -> ok                   parked until every key is set
//   kDelete  key                 -> ok existed u8
//   kCheck   n u32, n keys       -> ok m u32, m indexes u32 of the keys that are missing
// Anything else (unknown op, a length past its limit or past the frame, trailing bytes, an
// empty or oversized key) closes the connection. Parked requests have no server-side deadline:
// the client enforces its own and closes the connection to give up.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/bytes.h"
#include "chorus/store.h"

namespace chorus::internal::tcp_store {

inline constexpr uint32_t kMagic = 0x43485253;  // "CHRS"
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kHelloBytes = 8;
inline constexpr size_t kLengthBytes = 4;
// Room for the largest Set (op, key and value with their lengths) and then some.
inline constexpr size_t kMaxFrameBytes = kStoreMaxValueBytes + 64 * 1024;

enum class HelloStatus : uint16_t { kAccepted = 0, kBadVersion = 1 };
enum class Op : uint8_t { kSet = 1, kGet, kAdd, kWait, kDelete, kCheck };
enum class ReplyStatus : uint8_t { kOk = 0, kError = 1, kMissing = 2 };

// The integers' codec is base/bytes.h's; the protocol's users name it as proto::PutU32 etc.
using internal::LoadU16;
using internal::LoadU32;
using internal::LoadU64;
using internal::PutU16;
using internal::PutU32;
using internal::PutU64;

inline void PutBytes(std::string* out, std::string_view bytes) {
  PutU32(out, static_cast<uint32_t>(bytes.size()));
  out->append(bytes);
}

inline std::string Hello(uint32_t magic, uint16_t version, uint16_t last) {
  std::string out;
  PutU32(&out, magic);
  PutU16(&out, version);
  PutU16(&out, last);
  return out;
}

// Builds one frame: the length is filled in by Finish().
class FrameWriter {
 public:
  FrameWriter() : buf_(kLengthBytes, '\0') {}
  FrameWriter& U8(uint8_t v) {
    buf_.push_back(static_cast<char>(v));
    return *this;
  }
  FrameWriter& U32(uint32_t v) {
    PutU32(&buf_, v);
    return *this;
  }
  FrameWriter& I64(int64_t v) {
    PutU64(&buf_, static_cast<uint64_t>(v));
    return *this;
  }
  FrameWriter& Bytes(std::string_view v) {
    PutBytes(&buf_, v);
    return *this;
  }
  size_t body_size() const { return buf_.size() - kLengthBytes; }
  // Call once: the writer gives its buffer away.
  std::string Finish() {
    const auto n = static_cast<uint32_t>(body_size());
    for (size_t i = 0; i < kLengthBytes; ++i)
      buf_[i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
    return std::move(buf_);
  }

 private:
  std::string buf_;
};

// Parses a frame body. Every read checks the bytes left; after the first failure all reads
// fail, so a caller may read every field and test ok() once.
class FrameReader {
 public:
  explicit FrameReader(std::string_view body) : body_(body) {}

  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(body_[pos_++]);
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    const uint32_t v = LoadU32(body_.data() + pos_);
    pos_ += 4;
    return v;
  }
  int64_t I64() {
    if (!Need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(body_[pos_ + i]);
    pos_ += 8;
    return static_cast<int64_t>(v);
  }
  // A length-prefixed string of at most `max` bytes.
  std::string_view Bytes(size_t max) {
    const uint32_t n = U32();
    if (!ok_ || n > max || !Need(n)) {
      ok_ = false;
      return {};
    }
    std::string_view v = body_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  // A key: 1 .. kStoreMaxKeyBytes bytes.
  std::string_view Key() {
    std::string_view key = Bytes(kStoreMaxKeyBytes);
    if (key.empty()) ok_ = false;
    return key;
  }

  bool ok() const { return ok_; }
  // True when every byte was consumed without error.
  bool Done() const { return ok_ && pos_ == body_.size(); }
  size_t left() const { return ok_ ? body_.size() - pos_ : 0; }

 private:
  bool Need(size_t n) {
    if (ok_ && body_.size() - pos_ >= n) return true;
    ok_ = false;
    return false;
  }

  std::string_view body_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// A request parsed from a frame body. The views point into the body.
struct Request {
  Op op = Op::kSet;
  std::string_view key;                // kSet, kGet, kAdd, kDelete
  std::string_view value;              // kSet
  bool wait = false;                   // kGet
  int64_t delta = 0;                   // kAdd
  std::vector<std::string_view> keys;  // kWait, kCheck
};

// Parses one request body (the frame without its length). nullopt when it breaks any rule
// above: the server then closes the connection. Pure, so a fuzzer can drive it.
inline std::optional<Request> ParseRequest(std::string_view body) {
  FrameReader r(body);
  Request req;
  const uint8_t op = r.U8();
  if (!r.ok() || op < static_cast<uint8_t>(Op::kSet) || op > static_cast<uint8_t>(Op::kCheck)) {
    return std::nullopt;
  }
  req.op = static_cast<Op>(op);
  switch (req.op) {
    case Op::kSet:
      req.key = r.Key();
      req.value = r.Bytes(kStoreMaxValueBytes);
      break;
    case Op::kGet: {
      req.key = r.Key();
      const uint8_t wait = r.U8();
      if (wait > 1) return std::nullopt;
      req.wait = wait == 1;
      break;
    }
    case Op::kAdd:
      req.key = r.Key();
      req.delta = r.I64();
      break;
    case Op::kWait:
    case Op::kCheck: {
      const uint32_t n = r.U32();
      // Each key takes at least 5 bytes: refuse a count the frame cannot hold before reserving.
      if (!r.ok() || n > r.left() / 5) return std::nullopt;
      req.keys.reserve(n);
      for (uint32_t i = 0; i < n && r.ok(); ++i) req.keys.push_back(r.Key());
      break;
    }
    case Op::kDelete:
      req.key = r.Key();
      break;
  }
  if (!r.Done()) return std::nullopt;
  return req;
}

}  // namespace chorus::internal::tcp_store
