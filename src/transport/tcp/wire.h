// Protection of the TCP transport's frames after the handshake (CommOptions::wire).
//
// Each connection and direction has its own key (Handshake::SessionKey), and each frame its own
// nonce: the frame's sequence number on the connection, which the receiver also checks. So a
// frame cannot be moved to another connection, replayed, reordered or dropped without the next
// check failing. A protected frame is
//
//   header (64 bytes, as frame.h) | payload | tag (16 bytes)
//
//   integrity  tag = Poly1305(k_n, header | payload), k_n = ChaCha20(key, nonce n)[0..32)
//   encrypt    payload encrypted, tag = AEAD tag over (header as additional data, payload):
//              AES-256-GCM when this CPU has AES-NI, else ChaCha20-Poly1305 (IETF)
//
// Every rank of a communicator uses the same cipher: AES-256-GCM for kEncrypt only when every
// rank's CPU has AES-NI (the meeting tells, core/meet.h), else ChaCha20-Poly1305.
//
// Thread safety: a WireSeal belongs to one direction of one link; whoever holds that
// direction's lock uses it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "chorus/options.h"
#include "transport/tcp/frame.h"

namespace chorus::internal::tcp {

inline constexpr size_t kTagBytes = 16;

enum class WireCipher : uint8_t { kNone, kPoly1305, kAes256Gcm, kChaCha20Poly1305 };

// Whether this CPU runs AES-256-GCM in hardware (libsodium's check).
bool HasAesGcm();
// The cipher for `mode` when every rank has (`aes_everywhere`) or some lacks AES-GCM.
WireCipher CipherFor(WireMode mode, bool aes_everywhere);
const char* CipherName(WireCipher cipher);

class WireSeal {
 public:
  WireSeal(WireCipher cipher, const std::array<uint8_t, 32>& key);
  ~WireSeal();
  WireSeal(const WireSeal&) = delete;
  WireSeal& operator=(const WireSeal&) = delete;

  WireCipher cipher() const { return cipher_; }
  // Frame `sequence` (the header's): writes the tag; with encryption also the ciphertext of
  // `n` bytes at `src` to `dst` (which may be `src`).
  void Seal(uint64_t sequence, const uint8_t* header, const std::byte* src, std::byte* dst,
            size_t n, uint8_t* tag);
  // Checks frame `sequence` and, with encryption, decrypts its payload in place. False: the
  // frame was changed (or is not this connection's), and the payload must not be used.
  bool Open(uint64_t sequence, const uint8_t* header, std::byte* data, size_t n,
            const uint8_t* tag);

 private:
  struct State;
  WireCipher cipher_;
  std::array<uint8_t, 32> key_;
  std::unique_ptr<State> state_;  // the expanded AES key, aligned as libsodium wants it
};

}  // namespace chorus::internal::tcp
