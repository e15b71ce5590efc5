// Authentication of every TCP connection a job makes (store clients and transport peers).
//
// The ranks of a job share a secret (CHORUS_SECRET, CHORUS_SECRET_FILE, or one `chorus launch`
// generates). Each connection proves knowledge of it both ways with an HMAC-SHA-256
// challenge-response over fresh random nonces, before anything else crosses it:
//
//   1. dialer   -> acceptor  magic u32 | version u16 | claim_len u16 | nonce_d[32] | claim
//   2. acceptor -> dialer    magic u32 | version u16 | zero u16 | nonce_a[32] | mac_a[32]
//   3. dialer   -> acceptor  mac_d[32]
//   4. acceptor -> dialer    magic u32 | version u16 | zero u16                 ("accepted")
//
//   mac_a = HMAC(key, "chorus/acceptor" | claim | nonce_d | nonce_a)
//   mac_d = HMAC(key, "chorus/dialer"   | claim | nonce_a | nonce_d)
//
// The claim says what the dialer connects for ("store", "comm 1f2e... rank 3 -> 5") and is
// bound into both MACs, so a proof for one purpose cannot be replayed for another, and the
// distinct role labels stop a proof being reflected back. MACs are compared in constant time.
// The acceptor sends nothing but its nonce and MAC until the dialer has proved itself, and the
// dialer sends nothing but its claim until the acceptor has; so a party without the secret
// learns no job data. A failed proof closes the connection without saying why (to the peer;
// the local log says why).
//
// Handshake is an incremental state machine with no I/O of its own, so the same code serves
// blocking clients (RunHandshake) and epoll servers, and a fuzzer can drive it with bytes.
//
// Thread safety: Secret is an immutable value; a Handshake belongs to one connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/wait.h"
#include "chorus/status.h"

namespace chorus::internal {

class Secret {
 public:
  // The key derived from `text` (any non-empty bytes); `source` names where it came from for
  // errors ("CHORUS_SECRET").
  static Result<Secret> FromText(std::string_view text, std::string_view source);
  // The secret in the file at `path` (see ReadSecretFile).
  static Result<Secret> FromFile(const std::string& path);
  // 32 random bytes as 64 hexadecimal characters: a fresh secret for a launcher to hand out.
  static std::string Generate();

  const std::array<uint8_t, 32>& key() const { return key_; }

 private:
  std::array<uint8_t, 32> key_{};
};

class Handshake {
 public:
  enum class Role { kDialer, kAcceptor };
  static constexpr size_t kMaxClaimBytes = 256;

  // A dialer passes the claim it connects with; an acceptor passes "" and reads claim() once
  // done() (the caller decides whether that claim is acceptable).
  Handshake(const Secret& secret, Role role, std::string claim = "");

  // Bytes to send now (empty while waiting for the peer); Sent(n) consumes the first n.
  std::string_view output() const;
  void Sent(size_t n);
  // How many bytes the next step needs from the peer (0 when it needs none now).
  size_t wanted() const;
  // Feeds received bytes, at most wanted(). An error means the connection must be closed: the
  // message names what was wrong ("bad magic", "the peer does not know the job's secret").
  // Codes: kFailedPrecondition when a proof does not verify (the secrets differ), kUnavailable
  // for malformed input, kInternal when fed more than wanted(). The error sticks.
  Status Feed(const void* data, size_t n);
  // Both sides proved themselves and all output was sent.
  bool done() const;
  // Acceptor: the dialer's first message (its claim) has arrived; claim() holds it, not yet
  // proved. A caller may turn away a claim it does not expect without waiting for the proof.
  bool claimed() const {
    return role_ == Role::kAcceptor && (step_ == Step::kAwaitProof || step_ == Step::kDone);
  }
  const std::string& claim() const { return claim_; }

  // Once done(): a key for protecting what follows on this connection in one direction
  // (`dialer_to_acceptor`), the same on both ends and different for every connection:
  // HMAC(key, "chorus/wire/d2a" or ".../a2d" | claim | nonce_d | nonce_a).
  std::array<uint8_t, 32> SessionKey(bool dialer_to_acceptor) const;

 private:
  // Where the exchange stands; each waiting step names the message it expects next.
  enum class Step : uint8_t {
    kAwaitChallenge,  // dialer: message 2
    kAwaitAccepted,   // dialer: message 4
    kAwaitHeader,     // acceptor: the fixed part of message 1
    kAwaitClaim,      // acceptor: the nonce and claim of message 1
    kAwaitProof,      // acceptor: message 3
    kDone,
    kFailed,
  };

  size_t Expected() const;  // size of the message being collected in in_
  Status Fail(Status status);
  Status OnMessage();
  std::array<uint8_t, 32> Mac(std::string_view label, const std::array<uint8_t, 32>& first,
                              const std::array<uint8_t, 32>& second) const;

  const Secret secret_;
  const Role role_;
  std::string claim_;
  std::array<uint8_t, 32> own_nonce_{};
  std::array<uint8_t, 32> peer_nonce_{};
  std::string in_;   // bytes of the current incoming message
  std::string out_;  // bytes not yet sent
  Step step_;
  Status error_;  // why, once step_ is kFailed
};

// The text of the secret file at `path`, one trailing newline (\n or \r\n) removed. Refuses
// a file that group or others may read, as ssh does with private keys, and an empty one.
// Launchers and CommOptionsFromEnvironment read CHORUS_SECRET_FILE with it, so every party
// derives the same key.
Result<std::string> ReadSecretFile(const std::string& path);

// Runs `handshake` over the blocking or non-blocking socket `fd` until done or `deadline`
// (kDeadlineExceeded: "the peer did not finish the handshake"). For dialers and tests.
Status RunHandshake(int fd, Handshake& handshake, Deadline deadline);

}  // namespace chorus::internal
