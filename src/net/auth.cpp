// Secret and Handshake (see auth.h): the job's key and the HMAC-SHA-256 challenge-response,
// both on libsodium.
//
// The Handshake collects one whole incoming message in in_ before acting on it, with one
// exception: a magic is compared byte by byte as it arrives, so a stranger is dropped on its
// first wrong byte instead of after a length it chose. A length is read only from a complete
// header and checked against its limit before anything is sized by it. Once a step fails the
// Handshake stays failed: it outputs nothing more and every Feed repeats the error.
#include "net/auth.h"

#include <fcntl.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/bytes.h"
#include "base/errno_text.h"

namespace chorus::internal {
namespace {

constexpr uint32_t kAuthMagic = 0x43485241;  // "CHRA"
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 8;  // magic u32 | version u16 | claim_len or zero u16
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = crypto_auth_hmacsha256_BYTES;
constexpr size_t kChallengeBytes = kHeaderBytes + kNonceBytes + kMacBytes;  // message 2
static_assert(kMacBytes == 32 && crypto_auth_hmacsha256_KEYBYTES == 32);

constexpr std::string_view kAcceptorLabel = "chorus/acceptor";
constexpr std::string_view kDialerLabel = "chorus/dialer";
// Hashed in before the secret's text, so the key serves this protocol and nothing else.
constexpr std::string_view kKeyLabel = "chorus/secret/v1";
// A secret file is a line of text; anything much longer is the wrong file.
constexpr off_t kMaxSecretFileBytes = 64 * 1024;

// libsodium must be initialised once before its random numbers are used; sodium_init() itself
// is thread-safe and idempotent, the static only saves the repeated call.
void EnsureSodium() {
  [[maybe_unused]] static const bool ready = [] {
    if (sodium_init() < 0) {
      std::fprintf(stderr, "chorus: libsodium failed to initialise (no system randomness)\n");
      std::abort();  // every nonce would be predictable; refusing is the only safe answer
    }
    return true;
  }();
}

std::string Header(uint16_t last) {
  std::string out;
  PutU32(&out, kAuthMagic);
  PutU16(&out, kVersion);
  PutU16(&out, last);
  return out;
}

void Append(std::string* out, const std::array<uint8_t, 32>& bytes) {
  out->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::array<uint8_t, 32> Load32(const char* p) {
  std::array<uint8_t, 32> out;
  std::memcpy(out.data(), p, out.size());
  return out;
}

std::string Hex(const char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(p[i]);
    if (i > 0) out.push_back(' ');
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

// "0644"
std::string OctalMode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

// ------------------------------------------------------------------------------------ Secret

Result<Secret> Secret::FromText(std::string_view text, std::string_view source) {
  if (text.empty()) return InvalidArgument(std::string(source) + ": the secret is empty");
  EnsureSodium();
  Secret secret;
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, secret.key_.size());
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(kKeyLabel.data()),
                            kKeyLabel.size());
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(text.data()),
                            text.size());
  crypto_generichash_final(&state, secret.key_.data(), secret.key_.size());
  sodium_memzero(&state, sizeof(state));
  return secret;
}

Result<Secret> Secret::FromFile(const std::string& path) {
  auto text = ReadSecretFile(path);
  if (!text.ok()) return text.status();
  auto secret = FromText(*text, "secret file " + path);
  sodium_memzero(text->data(), text->size());
  return secret;
}

Result<std::string> ReadSecretFile(const std::string& path) {
  const std::string where = "secret file " + path;
  // O_NONBLOCK: a FIFO at `path` must be refused below, not block the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return InvalidArgument(where + ": cannot open: " + ErrnoText(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return InvalidArgument(where + ": " + ErrnoText(errno));
  if (!S_ISREG(st.st_mode)) return InvalidArgument(where + ": not a regular file");
  if ((st.st_mode & 077) != 0) {
    return InvalidArgument(where + " has mode " + OctalMode(st.st_mode) +
                           ", so group or others may read it; make it private with: chmod 600 " +
                           path);
  }
  if (st.st_size > kMaxSecretFileBytes) {
    return InvalidArgument(where + ": " + std::to_string(st.st_size) +
                           " bytes is too long for a secret (at most " +
                           std::to_string(kMaxSecretFileBytes) + ")");
  }
  std::string text;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InvalidArgument(where + ": read: " + ErrnoText(errno));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > static_cast<size_t>(kMaxSecretFileBytes)) {
      return InvalidArgument(where + ": too long for a secret");
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  if (text.empty()) return InvalidArgument(where + " is empty: put the job's secret in it");
  return text;
}

std::string Secret::Generate() {
  EnsureSodium();
  uint8_t bytes[32];
  randombytes_buf(bytes, sizeof(bytes));
  std::string hex = Hex(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  std::erase(hex, ' ');
  sodium_memzero(bytes, sizeof(bytes));
  return hex;
}

// --------------------------------------------------------------------------------- Handshake

Handshake::Handshake(const Secret& secret, Role role, std::string claim)
    : secret_(secret),
      role_(role),
      claim_(std::move(claim)),
      step_(role == Role::kDialer ? Step::kAwaitChallenge : Step::kAwaitHeader) {
  EnsureSodium();
  randombytes_buf(own_nonce_.data(), own_nonce_.size());
  if (role_ == Role::kAcceptor) {
    claim_.clear();  // the acceptor learns the claim from the dialer
    return;
  }
  if (claim_.size() > kMaxClaimBytes) {
    // Reported by the first Feed; nothing is ever sent.
    error_ = InvalidArgument("handshake: claim of " + std::to_string(claim_.size()) +
                             " bytes exceeds the limit of " + std::to_string(kMaxClaimBytes));
    step_ = Step::kFailed;
    return;
  }
  out_ = Header(static_cast<uint16_t>(claim_.size()));
  Append(&out_, own_nonce_);
  out_ += claim_;
}

std::string_view Handshake::output() const { return out_; }

void Handshake::Sent(size_t n) { out_.erase(0, std::min(n, out_.size())); }

size_t Handshake::Expected() const {
  switch (step_) {
    case Step::kAwaitChallenge:
      return kChallengeBytes;
    case Step::kAwaitAccepted:
    case Step::kAwaitHeader:
      return kHeaderBytes;
    case Step::kAwaitClaim:
      // in_ holds the complete header, which was checked before this step was entered.
      return kHeaderBytes + kNonceBytes + LoadU16(in_.data() + 6);
    case Step::kAwaitProof:
      return kMacBytes;
    case Step::kDone:
    case Step::kFailed:
      return 0;
  }
  return 0;
}

size_t Handshake::wanted() const { return Expected() - std::min(Expected(), in_.size()); }

bool Handshake::done() const { return step_ == Step::kDone && out_.empty(); }

Status Handshake::Fail(Status status) {
  step_ = Step::kFailed;
  error_ = std::move(status);
  // Whatever was still queued stays unsent: a failed peer gets no further bytes.
  out_.clear();
  in_.clear();
  return error_;
}

Status Handshake::Feed(const void* data, size_t n) {
  if (step_ == Step::kFailed) return error_;
  const size_t want = wanted();
  if (n > want) {
    return Fail(Internal("handshake: fed " + std::to_string(n) + " bytes when at most " +
                         std::to_string(want) + " were wanted"));
  }
  if (n == 0) return Status::Ok();
  const size_t before = in_.size();
  in_.append(static_cast<const char*>(data), n);

  // Messages that open with a header: compare the magic as far as it has arrived.
  const bool has_header = step_ == Step::kAwaitChallenge || step_ == Step::kAwaitAccepted ||
                          step_ == Step::kAwaitHeader;
  if (has_header && before < 4) {
    std::string magic;
    PutU32(&magic, kAuthMagic);
    const size_t have = std::min<size_t>(in_.size(), 4);
    if (std::memcmp(in_.data(), magic.data(), have) != 0) {
      return Fail(Unavailable("handshake: bad magic (received " + Hex(in_.data(), have) +
                              ", expected 43 48 52 41 \"CHRA\"): the peer is not a chorus peer"));
    }
  }
  if (in_.size() < Expected()) return Status::Ok();
  return OnMessage();
}

// A complete message is in in_.
Status Handshake::OnMessage() {
  const std::string_view from = role_ == Role::kDialer ? "the server" : "the peer";
  const bool has_header = step_ == Step::kAwaitChallenge || step_ == Step::kAwaitAccepted ||
                          step_ == Step::kAwaitHeader;
  if (has_header) {
    const uint16_t version = LoadU16(in_.data() + 4);
    if (version != kVersion) {
      return Fail(Unavailable("handshake: " + std::string(from) + " speaks handshake version " +
                              std::to_string(version) + ", this build version " +
                              std::to_string(kVersion)));
    }
    const uint16_t last = LoadU16(in_.data() + 6);
    if (step_ != Step::kAwaitHeader && last != 0) {
      return Fail(Unavailable("handshake: nonzero reserved field (" + std::to_string(last) +
                              ") from " + std::string(from)));
    }
  }

  switch (step_) {
    case Step::kAwaitHeader: {
      const uint16_t claim_len = LoadU16(in_.data() + 6);
      if (claim_len > kMaxClaimBytes) {
        return Fail(Unavailable("handshake: claim of " + std::to_string(claim_len) +
                                " bytes exceeds the limit of " + std::to_string(kMaxClaimBytes)));
      }
      step_ = Step::kAwaitClaim;  // keeps the header in in_: Expected() reads claim_len there
      return Status::Ok();
    }
    case Step::kAwaitClaim: {
      peer_nonce_ = Load32(in_.data() + kHeaderBytes);
      claim_.assign(in_, kHeaderBytes + kNonceBytes);
      in_.clear();
      out_ = Header(0);
      Append(&out_, own_nonce_);
      Append(&out_, Mac(kAcceptorLabel, peer_nonce_, own_nonce_));
      step_ = Step::kAwaitProof;
      return Status::Ok();
    }
    case Step::kAwaitProof: {
      const auto expected = Mac(kDialerLabel, own_nonce_, peer_nonce_);
      const bool valid = crypto_verify_32(reinterpret_cast<const unsigned char*>(in_.data()),
                                          expected.data()) == 0;
      in_.clear();
      if (!valid) {
        return Fail(FailedPrecondition("handshake: the peer does not know the job's secret"));
      }
      out_ += Header(0);
      step_ = Step::kDone;
      return Status::Ok();
    }
    case Step::kAwaitChallenge: {
      peer_nonce_ = Load32(in_.data() + kHeaderBytes);
      const auto expected = Mac(kAcceptorLabel, own_nonce_, peer_nonce_);
      const bool valid = crypto_verify_32(reinterpret_cast<const unsigned char*>(in_.data()) +
                                              kHeaderBytes + kNonceBytes,
                                          expected.data()) == 0;
      in_.clear();
      if (!valid) {
        return Fail(FailedPrecondition("handshake: the server does not know the job's secret"));
      }
      Append(&out_, Mac(kDialerLabel, peer_nonce_, own_nonce_));
      step_ = Step::kAwaitAccepted;
      return Status::Ok();
    }
    case Step::kAwaitAccepted:
      in_.clear();
      step_ = Step::kDone;
      return Status::Ok();
    case Step::kDone:
    case Step::kFailed:
      break;
  }
  return Fail(Internal("handshake: a message arrived in a step that expects none"));
}

// HMAC(key, label | claim | first | second).
std::array<uint8_t, 32> Handshake::Mac(std::string_view label, const std::array<uint8_t, 32>& first,
                                       const std::array<uint8_t, 32>& second) const {
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, secret_.key().data(), secret_.key().size());
  const auto update = [&](const void* p, size_t n) {
    crypto_auth_hmacsha256_update(&state, static_cast<const unsigned char*>(p), n);
  };
  update(label.data(), label.size());
  update(claim_.data(), claim_.size());
  update(first.data(), first.size());
  update(second.data(), second.size());
  std::array<uint8_t, 32> mac;
  crypto_auth_hmacsha256_final(&state, mac.data());
  sodium_memzero(&state, sizeof(state));
  return mac;
}

std::array<uint8_t, 32> Handshake::SessionKey(bool dialer_to_acceptor) const {
  const auto& nonce_d = role_ == Role::kDialer ? own_nonce_ : peer_nonce_;
  const auto& nonce_a = role_ == Role::kDialer ? peer_nonce_ : own_nonce_;
  return Mac(dialer_to_acceptor ? "chorus/wire/d2a" : "chorus/wire/a2d", nonce_d, nonce_a);
}

// ----------------------------------------------------------------------------- RunHandshake

Status RunHandshake(int fd, Handshake& handshake, Deadline deadline) {
  char buf[512];
  while (!handshake.done()) {
    short events = 0;
    if (!handshake.output().empty()) events |= POLLOUT;
    if (handshake.wanted() > 0) events |= POLLIN;
    if (events == 0) {
      // Neither side can move: the handshake failed (Feed repeats why) or is broken.
      Status s = handshake.Feed(nullptr, 0);
      return s.ok() ? Internal("handshake: stalled with nothing to send or receive") : s;
    }
    bool moved = false;
    if (events & POLLOUT) {
      const std::string_view out = handshake.output();
      const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        handshake.Sent(static_cast<size_t>(n));
        moved = true;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        if (errno == EPIPE || errno == ECONNRESET) {
          return Unavailable("the peer closed the connection during the handshake (wrong secret?)");
        }
        return Unavailable("handshake: send: " + ErrnoText(errno));
      }
    }
    if (const size_t want = handshake.wanted(); want > 0) {
      const ssize_t n = ::recv(fd, buf, std::min(want, sizeof(buf)), MSG_DONTWAIT);
      if (n > 0) {
        CHORUS_RETURN_IF_ERROR(handshake.Feed(buf, static_cast<size_t>(n)));
        moved = true;
      } else if (n == 0 || errno == ECONNRESET) {
        return Unavailable("the peer closed the connection during the handshake (wrong secret?)");
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Unavailable("handshake: recv: " + ErrnoText(errno));
      }
    }
    if (moved) continue;

    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      return DeadlineExceeded("the peer did not finish the handshake in time");
    }
    const int64_t ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
    if (rc < 0 && errno != EINTR) return Unavailable("handshake: poll: " + ErrnoText(errno));
    // Ready, hung up or in error: the next send or recv says which.
  }
  return Status::Ok();
}

}  // namespace chorus::internal
