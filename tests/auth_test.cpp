// Authentication tests (net/auth.h). The Handshake is driven in memory, so every byte
// each side emits can be inspected: both roles reach done() with the same secret and carry the
// claim; a wrong secret fails on both sides without either side emitting more than the protocol
// allows before the proof; bytes arrive one at a time; garbage, truncation, oversized lengths,
// overfeeding and a replayed proof all fail cleanly. The wire format is pinned by an
// independent reimplementation of the MACs with libsodium. Then Secret's sources (text, file
// permissions, generation) and RunHandshake over a socketpair, including a peer that stalls.
#include "net/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "support/temp_dir.h"

namespace chorus::internal {
namespace {

using ::testing::HasSubstr;
using Role = Handshake::Role;
using Clock = std::chrono::steady_clock;

constexpr size_t kHelloBytes = 8;       // message 1 without nonce and claim; message 4
constexpr size_t kChallengeBytes = 72;  // message 2
constexpr size_t kProofBytes = 32;      // message 3

Secret MakeSecret(std::string_view text) {
  auto s = Secret::FromText(text, "test");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : Secret();
}

// Everything one side has emitted so far, and whether it failed.
struct Side {
  Handshake* h;
  std::string sent;  // all bytes taken from output()
  Status error;
};

// Moves at most `chunk` bytes from `from`'s output into `to`, no more than `to` wants.
// Returns the number of bytes moved.
size_t MoveBytes(Side& from, Side& to, size_t chunk) {
  if (!to.error.ok() || !from.error.ok()) return 0;
  const std::string_view out = from.h->output();
  const size_t n = std::min({chunk, out.size(), to.h->wanted()});
  if (n == 0) return 0;
  const std::string bytes(out.substr(0, n));
  from.sent += bytes;
  from.h->Sent(n);
  to.error = to.h->Feed(bytes.data(), n);
  return n;
}

// Runs both sides until neither can move. `chunk` bytes per step.
void Pump(Side& a, Side& b, size_t chunk = SIZE_MAX) {
  for (int guard = 0; guard < 100000; ++guard) {
    const size_t moved = MoveBytes(a, b, chunk) + MoveBytes(b, a, chunk);
    if (moved == 0) return;
  }
  ADD_FAILURE() << "pump did not settle";
}

std::string U32(uint32_t v) {
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
  return out;
}

std::string U16(uint16_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v & 0xff)}; }

std::string Header(uint16_t last, uint16_t version = 1, uint32_t magic = 0x43485241) {
  return U32(magic) + U16(version) + U16(last);
}

// The MAC as the header comment specifies it, computed here without the code under test.
std::string ReferenceMac(const Secret& secret, std::string_view label, std::string_view claim,
                         std::string_view first, std::string_view second) {
  const std::string input =
      std::string(label) + std::string(claim) + std::string(first) + std::string(second);
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, secret.key().data(), secret.key().size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(input.data()),
                                input.size());
  crypto_auth_hmacsha256_final(&st, mac);
  return std::string(reinterpret_cast<const char*>(mac), sizeof(mac));
}

std::string Take(Handshake& h) {
  std::string out(h.output());
  h.Sent(out.size());
  return out;
}

// Feeds `bytes` the way a reader of a stream does, at most wanted() at a time; bytes left over
// once the handshake wants none are fed anyway, which is an error.
Status FeedAll(Handshake& h, std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t n = h.wanted() > 0 ? std::min(h.wanted(), bytes.size()) : bytes.size();
    CHORUS_RETURN_IF_ERROR(h.Feed(bytes.data(), n));
    bytes.remove_prefix(n);
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------ in memory

TEST(Handshake, SameSecretCompletesBothWaysAndCarriesTheClaim) {
  const Secret secret = MakeSecret("correct horse");
  const std::string claim = "comm 1f2e rank 3 -> 5";
  Handshake dialer(secret, Role::kDialer, claim);
  Handshake acceptor(secret, Role::kAcceptor);
  EXPECT_EQ(acceptor.output(), "");  // the acceptor speaks second
  Side d{&dialer, {}, {}};
  Side a{&acceptor, {}, {}};
  Pump(d, a);
  ASSERT_TRUE(d.error.ok()) << d.error;
  ASSERT_TRUE(a.error.ok()) << a.error;
  EXPECT_TRUE(dialer.done());
  EXPECT_TRUE(acceptor.done());
  EXPECT_EQ(acceptor.claim(), claim);
  EXPECT_EQ(dialer.claim(), claim);
  EXPECT_EQ(dialer.wanted(), 0u);
  EXPECT_EQ(acceptor.wanted(), 0u);
  // Exact sizes of the four messages.
  EXPECT_EQ(d.sent.size(), kHelloBytes + 32 + claim.size() + kProofBytes);
  EXPECT_EQ(a.sent.size(), kChallengeBytes + kHelloBytes);
  EXPECT_EQ(a.sent.substr(kChallengeBytes), Header(0));  // "accepted"
}

TEST(Handshake, EmptyClaimAndLongestClaimBothWork) {
  const Secret secret = MakeSecret("s");
  for (const std::string& claim : {std::string(), std::string(Handshake::kMaxClaimBytes, 'c')}) {
    Handshake dialer(secret, Role::kDialer, claim);
    Handshake acceptor(secret, Role::kAcceptor);
    Side d{&dialer, {}, {}};
    Side a{&acceptor, {}, {}};
    Pump(d, a);
    ASSERT_TRUE(d.error.ok() && a.error.ok()) << d.error << " / " << a.error;
    EXPECT_TRUE(dialer.done() && acceptor.done());
    EXPECT_EQ(acceptor.claim(), claim);
  }
}

TEST(Handshake, BytesFedOneAtATime) {
  const Secret secret = MakeSecret("one byte at a time");
  Handshake dialer(secret, Role::kDialer, "store");
  Handshake acceptor(secret, Role::kAcceptor);
  Side d{&dialer, {}, {}};
  Side a{&acceptor, {}, {}};
  Pump(d, a, 1);
  ASSERT_TRUE(d.error.ok()) << d.error;
  ASSERT_TRUE(a.error.ok()) << a.error;
  EXPECT_TRUE(dialer.done());
  EXPECT_TRUE(acceptor.done());
  EXPECT_EQ(acceptor.claim(), "store");
}

// The bytes on the wire match the header comment, checked with an independent MAC.
TEST(Handshake, WireFormatMatchesTheSpecification) {
  const Secret secret = MakeSecret("spec");
  Handshake dialer(secret, Role::kDialer, "store");
  const std::string m1 = Take(dialer);
  ASSERT_EQ(m1.size(), kHelloBytes + 32 + 5);
  EXPECT_EQ(m1.substr(0, 8), Header(5));
  EXPECT_EQ(m1.substr(40), "store");
  const std::string nonce_d = m1.substr(8, 32);

  Handshake acceptor(secret, Role::kAcceptor);
  ASSERT_TRUE(FeedAll(acceptor, m1).ok());
  const std::string m2 = Take(acceptor);
  ASSERT_EQ(m2.size(), kChallengeBytes);
  EXPECT_EQ(m2.substr(0, 8), Header(0));
  const std::string nonce_a = m2.substr(8, 32);
  EXPECT_NE(nonce_a, nonce_d);
  EXPECT_EQ(m2.substr(40), ReferenceMac(secret, "chorus/acceptor", "store", nonce_d, nonce_a));

  ASSERT_TRUE(FeedAll(dialer, m2).ok());
  const std::string m3 = Take(dialer);
  EXPECT_EQ(m3, ReferenceMac(secret, "chorus/dialer", "store", nonce_a, nonce_d));
  ASSERT_TRUE(FeedAll(acceptor, m3).ok());
  EXPECT_EQ(Take(acceptor), Header(0));
  EXPECT_TRUE(acceptor.done());
  ASSERT_TRUE(FeedAll(dialer, Header(0)).ok());
  EXPECT_TRUE(dialer.done());
}

TEST(Handshake, NoncesAreFreshEachTime) {
  const Secret secret = MakeSecret("fresh");
  Handshake a(secret, Role::kDialer, "x");
  Handshake b(secret, Role::kDialer, "x");
  EXPECT_NE(a.output().substr(8, 32), b.output().substr(8, 32));
}

// The dialer checks the acceptor's proof first, so a wrong secret stops the dialer before it
// sends its own proof, and the acceptor never gets past its challenge.
TEST(Handshake, WrongSecretFailsAtTheDialerBeforeItProvesAnything) {
  Handshake dialer(MakeSecret("right"), Role::kDialer, "store");
  Handshake acceptor(MakeSecret("wrong"), Role::kAcceptor);
  Side d{&dialer, {}, {}};
  Side a{&acceptor, {}, {}};
  Pump(d, a);
  EXPECT_EQ(d.error.code(), StatusCode::kFailedPrecondition) << d.error;
  EXPECT_THAT(d.error.message(), HasSubstr("the server does not know the job's secret"));
  EXPECT_TRUE(a.error.ok());
  EXPECT_EQ(d.sent.size(), kHelloBytes + 32 + 5);  // its claim and nothing else
  EXPECT_EQ(a.sent.size(), kChallengeBytes);       // its challenge and nothing else
  EXPECT_EQ(dialer.output(), "");
  EXPECT_EQ(dialer.wanted(), 0u);
  EXPECT_FALSE(dialer.done());
  EXPECT_FALSE(acceptor.done());
  // The failure sticks.
  EXPECT_EQ(dialer.Feed(nullptr, 0), d.error);
}

// A dialer that does not know the secret but sends a proof anyway (computed with its own key,
// or made up) is refused, and the acceptor sends nothing after its challenge.
TEST(Handshake, WrongSecretFailsAtTheAcceptorAndItSendsNothingMore) {
  const Secret right = MakeSecret("right");
  const Secret wrong = MakeSecret("wrong");
  for (const bool made_up : {false, true}) {
    Handshake acceptor(right, Role::kAcceptor);
    Handshake honest_wrong(wrong, Role::kDialer, "store");
    const std::string m1 = Take(honest_wrong);
    ASSERT_TRUE(FeedAll(acceptor, m1).ok());
    const std::string m2 = Take(acceptor);
    ASSERT_EQ(m2.size(), kChallengeBytes);
    const std::string proof =
        made_up ? std::string(32, '\x5a')
                : ReferenceMac(wrong, "chorus/dialer", "store", m2.substr(8, 32), m1.substr(8, 32));
    const Status s = FeedAll(acceptor, proof);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("the peer does not know the job's secret"));
    EXPECT_EQ(acceptor.output(), "");
    EXPECT_FALSE(acceptor.done());
    EXPECT_EQ(acceptor.wanted(), 0u);
  }
}

// A proof recorded from a successful exchange is useless on a new connection: the new
// acceptor's nonce differs.
TEST(Handshake, ReplayedProofIsRefused) {
  const Secret secret = MakeSecret("replay");
  Handshake dialer(secret, Role::kDialer, "store");
  Handshake first(secret, Role::kAcceptor);
  const std::string m1 = Take(dialer);
  ASSERT_TRUE(FeedAll(first, m1).ok());
  ASSERT_TRUE(FeedAll(dialer, Take(first)).ok());
  const std::string m3 = Take(dialer);
  ASSERT_TRUE(FeedAll(first, m3).ok());
  EXPECT_EQ(Take(first), Header(0));
  EXPECT_TRUE(first.done());

  Handshake second(secret, Role::kAcceptor);
  ASSERT_TRUE(FeedAll(second, m1).ok());
  EXPECT_EQ(Take(second).size(), kChallengeBytes);
  const Status s = FeedAll(second, m3);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(second.output(), "");
  EXPECT_FALSE(second.done());
}

// The claim is bound into both proofs: a claim altered on the way fails at the dialer.
TEST(Handshake, TamperedClaimIsDetected) {
  const Secret secret = MakeSecret("bind");
  Handshake dialer(secret, Role::kDialer, "comm 1 rank 0 -> 1");
  Handshake acceptor(secret, Role::kAcceptor);
  std::string m1 = Take(dialer);
  m1.back() = '2';  // "rank 0 -> 2"
  ASSERT_TRUE(FeedAll(acceptor, m1).ok());
  EXPECT_EQ(acceptor.claim(), "comm 1 rank 0 -> 2");
  const Status s = FeedAll(dialer, Take(acceptor));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(dialer.output(), "");
}

// A proof is not valid in the other direction: the acceptor's MAC sent back as the dialer's.
TEST(Handshake, ReflectedProofIsRefused) {
  const Secret secret = MakeSecret("mirror");
  Handshake acceptor(secret, Role::kAcceptor);
  // A peer without the secret returns the acceptor's own MAC as its proof.
  const std::string m1 = Header(0) + std::string(32, '\x01');
  ASSERT_TRUE(FeedAll(acceptor, m1).ok());
  const std::string m2 = Take(acceptor);
  const Status s = FeedAll(acceptor, m2.substr(40));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
}

TEST(Handshake, GarbageIsRefusedOnItsFirstWrongByte) {
  const Secret secret = MakeSecret("g");
  Handshake acceptor(secret, Role::kAcceptor);
  EXPECT_EQ(acceptor.wanted(), kHelloBytes);
  ASSERT_TRUE(FeedAll(acceptor, "C").ok());  // right so far
  const Status s = FeedAll(acceptor, "X");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("bad magic (received 43 58"));
  EXPECT_EQ(acceptor.wanted(), 0u);
  EXPECT_EQ(acceptor.output(), "");

  Handshake http(secret, Role::kAcceptor);
  EXPECT_THAT(FeedAll(http, "GET / HT").message(), HasSubstr("bad magic (received 47 45 54 20"));

  // The dialer refuses a challenge that is not one.
  Handshake dialer(secret, Role::kDialer, "store");
  Take(dialer);
  const std::string junk(kChallengeBytes, '\xff');
  EXPECT_THAT(FeedAll(dialer, junk).message(), HasSubstr("bad magic"));
  EXPECT_EQ(dialer.output(), "");
}

TEST(Handshake, WrongVersionAndReservedFieldsAreNamed) {
  const Secret secret = MakeSecret("v");
  Handshake acceptor(secret, Role::kAcceptor);
  const Status s = FeedAll(acceptor, Header(0, /*version=*/2));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("handshake version 2, this build version 1"));

  Handshake dialer(secret, Role::kDialer, "");
  Take(dialer);
  const std::string m2 = Header(7) + std::string(64, '\0');
  EXPECT_THAT(FeedAll(dialer, m2).message(), HasSubstr("nonzero reserved field (7)"));

  Handshake dialer2(secret, Role::kDialer, "");
  Take(dialer2);
  const std::string m2v = Header(0, /*version=*/0) + std::string(64, '\0');
  EXPECT_THAT(FeedAll(dialer2, m2v).message(), HasSubstr("speaks handshake version 0"));
}

TEST(Handshake, OversizedClaimLengthIsRefusedBeforeItIsRead) {
  const Secret secret = MakeSecret("o");
  for (const uint16_t len : {uint16_t{257}, uint16_t{0xffff}}) {
    Handshake acceptor(secret, Role::kAcceptor);
    const Status s = FeedAll(acceptor, Header(len));
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_THAT(s.message(),
                HasSubstr("claim of " + std::to_string(len) + " bytes exceeds the limit of 256"));
    EXPECT_EQ(acceptor.wanted(), 0u);
  }
  // Exactly at the limit is fine: the acceptor then wants the nonce and 256 claim bytes.
  Handshake at_limit(secret, Role::kAcceptor);
  ASSERT_TRUE(FeedAll(at_limit, Header(256)).ok());
  EXPECT_EQ(at_limit.wanted(), 32u + 256u);

  // A dialer asked to send an oversized claim sends nothing and reports why.
  Handshake dialer(secret, Role::kDialer, std::string(257, 'c'));
  EXPECT_EQ(dialer.output(), "");
  EXPECT_EQ(dialer.wanted(), 0u);
  const Status d = dialer.Feed(nullptr, 0);
  EXPECT_EQ(d.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(d.message(), HasSubstr("claim of 257 bytes"));
}

TEST(Handshake, TruncatedMessagesLeaveItWaiting) {
  const Secret secret = MakeSecret("t");
  Handshake dialer(secret, Role::kDialer, "store");
  Handshake acceptor(secret, Role::kAcceptor);
  const std::string m1 = Take(dialer);
  ASSERT_TRUE(FeedAll(acceptor, m1.substr(0, m1.size() - 1)).ok());
  EXPECT_EQ(acceptor.wanted(), 1u);
  EXPECT_EQ(acceptor.output(), "");  // nothing until the whole message is in
  EXPECT_FALSE(acceptor.done());
  ASSERT_TRUE(FeedAll(acceptor, m1.substr(m1.size() - 1)).ok());
  EXPECT_EQ(acceptor.output().size(), kChallengeBytes);
}

TEST(Handshake, FeedingMoreThanWantedIsAnErrorNotAnOverflow) {
  const Secret secret = MakeSecret("f");
  Handshake acceptor(secret, Role::kAcceptor);
  const std::string too_much = Header(0) + std::string(40, '\0');  // header + nonce + 8 extra
  const Status s = acceptor.Feed(too_much.data(), too_much.size());
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr("fed 48 bytes when at most 8 were wanted"));
  EXPECT_EQ(acceptor.wanted(), 0u);
  EXPECT_EQ(FeedAll(acceptor, "x"), s);

  // After done(), any byte is too many.
  Handshake dialer(secret, Role::kDialer, "store");
  Handshake ok(secret, Role::kAcceptor);
  Side d{&dialer, {}, {}};
  Side a{&ok, {}, {}};
  Pump(d, a);
  ASSERT_TRUE(ok.done());
  EXPECT_EQ(ok.Feed("x", 1).code(), StatusCode::kInternal);
  // Sent() past the end only empties the output.
  Handshake fresh(secret, Role::kDialer, "store");
  fresh.Sent(100000);
  EXPECT_EQ(fresh.output(), "");
}

// --------------------------------------------------------------------------------- Secret

TEST(Secret, FromTextIsDeterministicAndDistinguishesTexts) {
  const Secret a1 = MakeSecret("alpha");
  const Secret a2 = MakeSecret("alpha");
  const Secret b = MakeSecret("alphb");
  EXPECT_EQ(a1.key(), a2.key());
  EXPECT_NE(a1.key(), b.key());
  // The derivation: BLAKE2b-256 of a fixed label and the text (pinned so that ranks built from
  // different versions agree).
  std::array<uint8_t, 32> expected{};
  const std::string input = "chorus/secret/v1alpha";
  crypto_generichash(expected.data(), expected.size(),
                     reinterpret_cast<const unsigned char*>(input.data()), input.size(), nullptr,
                     0);
  EXPECT_EQ(a1.key(), expected);
  auto empty = Secret::FromText("", "CHORUS_SECRET");
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("CHORUS_SECRET: the secret is empty"));
}

TEST(Secret, GenerateGivesSixtyFourFreshHexDigits) {
  const std::string a = Secret::Generate();
  const std::string b = Secret::Generate();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
  EXPECT_TRUE(Secret::FromText(a, "generated").ok());
}

class SecretFile : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }
  const testing::TempDir tmp_{"chorus-auth-test"};
  const std::string dir_ = tmp_.path();
};

TEST_F(SecretFile, PrivateFileGivesTheSameKeyAsTheText) {
  const std::string path = Write("secret", "hunter2\n", 0600);
  auto s = Secret::FromFile(path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->key(), MakeSecret("hunter2").key());  // one trailing newline ignored
  auto crlf = Secret::FromFile(Write("crlf", "hunter2\r\n", 0400));
  ASSERT_TRUE(crlf.ok()) << crlf.status();
  EXPECT_EQ(crlf->key(), MakeSecret("hunter2").key());
  auto two = Secret::FromFile(Write("two", "hunter2\n\n", 0600));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->key(), MakeSecret("hunter2\n").key());  // only one newline is dropped
}

TEST_F(SecretFile, FileThatOthersMayReadIsRefusedWithTheFix) {
  for (const mode_t mode : {mode_t{0644}, mode_t{0640}, mode_t{0604}, mode_t{0660}}) {
    const std::string path = Write("secret", "hunter2", mode);
    auto s = Secret::FromFile(path);
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode));
    EXPECT_THAT(s.status().message(), HasSubstr("secret file " + path + " has mode " + octal));
    EXPECT_THAT(s.status().message(), HasSubstr("chmod 600 " + path));
  }
}

TEST_F(SecretFile, EmptyMissingAndOddFilesAreRefused) {
  for (const std::string& content : {std::string(), std::string("\n")}) {
    auto s = Secret::FromFile(Write("empty", content, 0600));
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("is empty"));
  }
  auto missing = Secret::FromFile(dir_ + "/nope");
  EXPECT_THAT(missing.status().message(),
              HasSubstr("secret file " + dir_ + "/nope: cannot open: No such file or directory"));
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  auto directory = Secret::FromFile(dir_);
  EXPECT_THAT(directory.status().message(), HasSubstr("not a regular file"));
  auto huge = Secret::FromFile(Write("huge", std::string(100000, 'x'), 0600));
  EXPECT_THAT(huge.status().message(), HasSubstr("too long for a secret"));
}

// ------------------------------------------------------------------------- RunHandshake

struct SocketPair {
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0); }
  ~SocketPair() {
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  void Close(int i) {
    close(fds[i]);
    fds[i] = -1;
  }
  int fds[2] = {-1, -1};
};

Deadline In(std::chrono::milliseconds ms) { return Clock::now() + ms; }

TEST(RunHandshake, BothSidesOverASocketPair) {
  const Secret secret = MakeSecret("pair");
  SocketPair pair;
  Handshake acceptor(secret, Role::kAcceptor);
  Status accept_status;
  std::thread t(
      [&] { accept_status = RunHandshake(pair.fds[1], acceptor, In(std::chrono::seconds(20))); });
  Handshake dialer(secret, Role::kDialer, "comm 7 rank 1 -> 0");
  const Status s = RunHandshake(pair.fds[0], dialer, In(std::chrono::seconds(20)));
  t.join();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(accept_status.ok()) << accept_status;
  EXPECT_EQ(acceptor.claim(), "comm 7 rank 1 -> 0");
  // Nothing is left over in either direction.
  char byte;
  EXPECT_EQ(recv(pair.fds[0], &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(recv(pair.fds[1], &byte, 1, MSG_DONTWAIT), -1);
}

TEST(RunHandshake, WrongSecretFailsOnBothSides) {
  SocketPair pair;
  Handshake acceptor(MakeSecret("one"), Role::kAcceptor);
  Status accept_status;
  std::thread t(
      [&] { accept_status = RunHandshake(pair.fds[1], acceptor, In(std::chrono::seconds(20))); });
  Handshake dialer(MakeSecret("two"), Role::kDialer, "store");
  const Status s = RunHandshake(pair.fds[0], dialer, In(std::chrono::seconds(20)));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("the server does not know the job's secret"));
  pair.Close(0);  // what a real dialer does next
  t.join();
  EXPECT_EQ(accept_status.code(), StatusCode::kUnavailable) << accept_status;
  EXPECT_THAT(accept_status.message(),
              HasSubstr("the peer closed the connection during the handshake (wrong secret?)"));
}

TEST(RunHandshake, StalledPeerHitsTheDeadline) {
  const Secret secret = MakeSecret("stall");
  for (const Role role : {Role::kDialer, Role::kAcceptor}) {
    SocketPair pair;  // the other end never reads nor writes
    Handshake h(secret, role, role == Role::kDialer ? "store" : "");
    const auto start = Clock::now();
    const Status s = RunHandshake(pair.fds[0], h, In(std::chrono::milliseconds(200)));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(s.message(), HasSubstr("did not finish the handshake"));
    EXPECT_LT(seconds, 10.0);
  }
}

TEST(RunHandshake, PeerThatSendsHalfAMessageThenCloses) {
  const Secret secret = MakeSecret("half");
  SocketPair pair;
  Handshake acceptor(secret, Role::kAcceptor);
  const std::string half = Header(5) + std::string(10, '\0');
  ASSERT_EQ(send(pair.fds[1], half.data(), half.size(), 0), static_cast<ssize_t>(half.size()));
  pair.Close(1);
  const Status s = RunHandshake(pair.fds[0], acceptor, In(std::chrono::seconds(20)));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("closed the connection during the handshake"));
}

TEST(RunHandshake, GarbageFromThePeerEndsItWithTheReason) {
  const Secret secret = MakeSecret("junk");
  SocketPair pair;
  Handshake dialer(secret, Role::kDialer, "store");
  const std::string junk = "HTTP/1.0 400 Bad Request\r\n\r\n";
  ASSERT_EQ(send(pair.fds[1], junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
  const Status s = RunHandshake(pair.fds[0], dialer, In(std::chrono::seconds(20)));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("bad magic"));
}

}  // namespace
}  // namespace chorus::internal
