// libFuzzer target: every parser that reads bytes off the network before the peer is trusted.
// Built only with -DCHORUS_FUZZ=ON under clang; scripts/fuzz.sh builds and runs it.
//
// Each input goes to all of them, and each checks properties beyond "no crash" (a failed
// CHORUS_CHECK aborts, which libFuzzer reports with the input):
//   acceptor   Handshake fed the input as dialer messages, whole and one byte at a time: both
//              ways agree; it never completes (the input cannot know the key, and the nonce is
//              fresh each run); it sends at most its challenge; a failure sticks and silences it.
//   dialer     Handshake fed the input after its first message: it never completes and never
//              sends its proof.
//   tamper     An honest exchange whose bytes in flight are XORed at positions the input picks
//              (up to 16 edits of 3 bytes: position u16, mask u8): untouched, both sides complete
//              and carry the claim; touched, the dialer never completes, and the acceptor never
//              completes after receiving a touched byte.
//   frame      tcp::DecodeFrameHeader on the first 64 bytes, expecting the communicator and
//              sequence the header names itself (so the later checks are reached) and then a
//              fixed expectation: a header it accepts encodes back to the same bytes and stays
//              within its length limit.
//   request    tcp_store::ParseRequest on the whole input: a request it accepts encodes back to
//              the same bytes and respects the key limits.
//
// CHORUS_FUZZ_SEEDS=<dir> makes the binary write a seed corpus of valid messages there and exit.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "net/auth.h"
#include "rendezvous/tcp_protocol.h"
#include "transport/tcp/frame.h"

namespace chorus::internal {
namespace {

namespace proto = tcp_store;
using Role = Handshake::Role;

const Secret& Key() {
  static const Secret secret = Secret::FromText("fuzz", "fuzz").value();
  return secret;
}

uint64_t LoadU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// Feeds `in` to `h` in pieces of at most `chunk` bytes (and never more than it wants, until it
// wants nothing: then the rest, which must fail). Returns the first error, and adds everything
// `h` wanted to send to *sent.
Status FeedStream(Handshake& h, std::string_view in, size_t chunk, std::string* sent) {
  while (!in.empty()) {
    const size_t n = h.wanted() > 0 ? std::min({h.wanted(), chunk, in.size()}) : in.size();
    const Status s = h.Feed(in.data(), n);
    in.remove_prefix(n);
    sent->append(h.output());
    h.Sent(h.output().size());
    if (!s.ok()) {
      CHORUS_CHECK(h.output().empty());
      CHORUS_CHECK_EQ(h.wanted(), size_t{0});
      CHORUS_CHECK(!h.done());
      CHORUS_CHECK(h.Feed(nullptr, 0) == s);  // sticks
      return s;
    }
  }
  return Status::Ok();
}

void FuzzAcceptor(std::string_view in) {
  Handshake whole(Key(), Role::kAcceptor);
  Handshake bytewise(Key(), Role::kAcceptor);
  std::string sent_whole, sent_bytewise;
  const Status a = FeedStream(whole, in, SIZE_MAX, &sent_whole);
  const Status b = FeedStream(bytewise, in, 1, &sent_bytewise);
  CHORUS_CHECK_EQ(static_cast<int>(a.code()), static_cast<int>(b.code()));
  CHORUS_CHECK_EQ(sent_whole.size(), sent_bytewise.size());
  CHORUS_CHECK(!whole.done() && !bytewise.done());
  CHORUS_CHECK_LE(sent_whole.size(), size_t{72});
  CHORUS_CHECK_LE(whole.claim().size(), Handshake::kMaxClaimBytes);
}

void FuzzDialer(std::string_view in) {
  Handshake h(Key(), Role::kDialer, "store");
  h.Sent(h.output().size());
  std::string sent;
  FeedStream(h, in, SIZE_MAX, &sent).IgnoreError();
  CHORUS_CHECK(sent.empty());
  CHORUS_CHECK(!h.done());
}

void FuzzTamperedExchange(std::string_view in) {
  // The net mask of every position: two edits of one byte may cancel out.
  constexpr size_t kPositions = 256;  // the exchange below is 173 bytes long
  std::array<uint8_t, kPositions> masks{};
  for (size_t i = 0; i + 3 <= in.size() && i < 16 * 3; i += 3) {
    const auto* p = reinterpret_cast<const uint8_t*>(in.data() + i);
    masks[static_cast<size_t>(p[0] << 8 | p[1]) % kPositions] ^= p[2];
  }
  const std::string claim = "comm 1f2e rank 3 -> 5";
  Handshake dialer(Key(), Role::kDialer, claim);
  Handshake acceptor(Key(), Role::kAcceptor);
  size_t position = 0;  // of the next byte on the wire, both directions counted in turn
  bool tampered = false;
  bool acceptor_saw_tamper = false;
  // Moves what `from` wants to send and `to` wants to hear, applying the edits on the way.
  const auto move = [&](Handshake& from, Handshake& to, bool to_acceptor) -> bool {
    const size_t n = std::min(from.output().size(), to.wanted());
    if (n == 0) return false;
    std::string bytes(from.output().substr(0, n));
    from.Sent(n);
    for (size_t i = 0; i < bytes.size(); ++i, ++position) {
      const uint8_t mask = position < kPositions ? masks[position] : 0;
      if (mask == 0) continue;
      bytes[i] = static_cast<char>(bytes[i] ^ mask);
      tampered = true;
      acceptor_saw_tamper |= to_acceptor;
    }
    to.Feed(bytes.data(), bytes.size()).IgnoreError();
    return true;
  };
  for (int round = 0; round < 64; ++round) {
    const bool a = move(dialer, acceptor, true);
    const bool b = move(acceptor, dialer, false);
    if (!a && !b) break;
  }
  if (!tampered) {
    CHORUS_CHECK(dialer.done() && acceptor.done());
    CHORUS_CHECK(acceptor.claim() == claim);
  } else {
    CHORUS_CHECK(!dialer.done());
    if (acceptor_saw_tamper) CHORUS_CHECK(!acceptor.done());
  }
}

void CheckFrame(const uint8_t* bytes, const tcp::FrameExpectation& expect) {
  tcp::FrameHeader header;
  if (!tcp::DecodeFrameHeader(bytes, expect, &header).ok()) return;
  uint8_t again[tcp::kFrameHeaderBytes];
  tcp::EncodeFrameHeader(header, again);
  CHORUS_CHECK(std::memcmp(again, bytes, sizeof(again)) == 0);
  CHORUS_CHECK_EQ(header.comm_id, expect.comm_id);
  CHORUS_CHECK_EQ(header.sequence, expect.sequence);
  const uint64_t limit = header.type == tcp::FrameType::kData ? expect.max_data_bytes
                                                              : uint64_t{tcp::kMaxControlBytes};
  CHORUS_CHECK_LE(header.length, limit);
}

void FuzzFrameHeader(const uint8_t* data, size_t size) {
  if (size < tcp::kFrameHeaderBytes) return;
  tcp::FrameExpectation self;
  self.comm_id = LoadU64(data + 8);
  self.sequence = LoadU64(data + 16);
  self.max_data_bytes = size >= 72 ? LoadU64(data + 64) : uint64_t{1} << 20;
  CheckFrame(data, self);
  CheckFrame(data, tcp::FrameExpectation{.comm_id = 1, .sequence = 0, .max_data_bytes = 4096});
}

void FuzzRequest(std::string_view body) {
  const std::optional<proto::Request> req = proto::ParseRequest(body);
  if (!req) return;
  proto::FrameWriter w;
  w.U8(static_cast<uint8_t>(req->op));
  switch (req->op) {
    case proto::Op::kSet:
      w.Bytes(req->key).Bytes(req->value);
      break;
    case proto::Op::kGet:
      w.Bytes(req->key).U8(req->wait ? 1 : 0);
      break;
    case proto::Op::kAdd:
      w.Bytes(req->key).I64(req->delta);
      break;
    case proto::Op::kWait:
    case proto::Op::kCheck:
      w.U32(static_cast<uint32_t>(req->keys.size()));
      for (const std::string_view key : req->keys) {
        CHORUS_CHECK(!key.empty() && key.size() <= kStoreMaxKeyBytes);
        w.Bytes(key);
      }
      break;
    case proto::Op::kDelete:
      w.Bytes(req->key);
      break;
  }
  if (req->op != proto::Op::kWait && req->op != proto::Op::kCheck) {
    CHORUS_CHECK(!req->key.empty() && req->key.size() <= kStoreMaxKeyBytes);
  }
  const std::string frame = w.Finish();
  CHORUS_CHECK(std::string_view(frame).substr(proto::kLengthBytes) == body);
}

// ------------------------------------------------------------------------------ seed corpus

void WriteSeed(const std::string& dir, const std::string& name, std::string_view bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary).write(bytes.data(), bytes.size());
}

void WriteSeeds(const std::string& dir) {
  Handshake dialer(Key(), Role::kDialer, "store");
  const std::string m1(dialer.output());
  WriteSeed(dir, "handshake_m1", m1);
  Handshake acceptor(Key(), Role::kAcceptor);
  std::string m2;
  FeedStream(acceptor, m1, SIZE_MAX, &m2).IgnoreError();
  WriteSeed(dir, "handshake_m2", m2);
  WriteSeed(dir, "handshake_header", std::string("CHRA\x00\x01\x01\x00", 8));
  WriteSeed(dir, "tamper_one", std::string("\x00\x05\x01", 3));
  WriteSeed(dir, "tamper_late", std::string("\x00\x90\x80\x00\xa0\x01", 6));

  tcp::FrameHeader h;
  h.comm_id = 0x1f2e3d4c5b6a7988;
  h.sequence = 3;
  h.tag = CallTag{.call_index = 2, .count = 1000};
  h.length = 4000;
  uint8_t bytes[tcp::kFrameHeaderBytes + 8] = {};
  tcp::EncodeFrameHeader(h, bytes);
  for (int i = 0; i < 8; ++i)
    bytes[64 + i] = static_cast<uint8_t>((uint64_t{1} << 20) >> (56 - 8 * i));
  WriteSeed(dir, "frame_data", std::string_view(reinterpret_cast<char*>(bytes), sizeof(bytes)));
  h.type = tcp::FrameType::kFail;
  h.length = 12;
  tcp::EncodeFrameHeader(h, bytes);
  WriteSeed(dir, "frame_fail",
            std::string_view(reinterpret_cast<char*>(bytes), tcp::kFrameHeaderBytes));

  const auto op = [](proto::Op o) { return static_cast<uint8_t>(o); };
  const auto body = [](std::string frame) { return frame.substr(proto::kLengthBytes); };
  WriteSeed(dir, "req_set",
            body(proto::FrameWriter().U8(op(proto::Op::kSet)).Bytes("k").Bytes("v").Finish()));
  WriteSeed(dir, "req_get",
            body(proto::FrameWriter().U8(op(proto::Op::kGet)).Bytes("key").U8(1).Finish()));
  WriteSeed(dir, "req_add",
            body(proto::FrameWriter().U8(op(proto::Op::kAdd)).Bytes("n").I64(-5).Finish()));
  WriteSeed(
      dir, "req_wait",
      body(proto::FrameWriter().U8(op(proto::Op::kWait)).U32(2).Bytes("a").Bytes("bb").Finish()));
  WriteSeed(dir, "req_check",
            body(proto::FrameWriter().U8(op(proto::Op::kCheck)).U32(1).Bytes("a").Finish()));
  WriteSeed(dir, "req_delete",
            body(proto::FrameWriter().U8(op(proto::Op::kDelete)).Bytes("gone").Finish()));
}

}  // namespace
}  // namespace chorus::internal

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (const char* dir = std::getenv("CHORUS_FUZZ_SEEDS"); dir != nullptr && *dir != '\0') {
    chorus::internal::WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::internal;  // NOLINT: the entry point only dispatches
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  FuzzAcceptor(in);
  FuzzDialer(in);
  FuzzTamperedExchange(in);
  FuzzFrameHeader(data, size);
  FuzzRequest(in);
  return 0;
}
