// Frame protection (see wire.h).
#include "transport/tcp/wire.h"

#include <sodium.h>

#include <cstring>

#include "base/check.h"

namespace chorus::internal::tcp {
namespace {

// The 12-byte nonce of frame `sequence`: four zero bytes, then the sequence big-endian.
void Nonce(uint64_t sequence, unsigned char nonce[12]) {
  std::memset(nonce, 0, 4);
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<unsigned char>(sequence >> (56 - 8 * i));
}

bool SodiumReady() {
  static const bool ready = sodium_init() >= 0;
  return ready;
}

}  // namespace

struct WireSeal::State {
  crypto_aead_aes256gcm_state aes;
};

bool HasAesGcm() { return SodiumReady() && crypto_aead_aes256gcm_is_available() != 0; }

WireCipher CipherFor(WireMode mode, bool aes_everywhere) {
  switch (mode) {
    case WireMode::kAuthenticate:
      return WireCipher::kNone;
    case WireMode::kIntegrity:
      return WireCipher::kPoly1305;
    case WireMode::kEncrypt:
      return aes_everywhere ? WireCipher::kAes256Gcm : WireCipher::kChaCha20Poly1305;
  }
  return WireCipher::kNone;
}

const char* CipherName(WireCipher cipher) {
  switch (cipher) {
    case WireCipher::kNone:
      return "none";
    case WireCipher::kPoly1305:
      return "poly1305";
    case WireCipher::kAes256Gcm:
      return "aes256gcm";
    case WireCipher::kChaCha20Poly1305:
      return "chacha20poly1305";
  }
  return "unknown";
}

WireSeal::WireSeal(WireCipher cipher, const std::array<uint8_t, 32>& key)
    : cipher_(cipher), key_(key) {
  CHORUS_CHECK(SodiumReady());
  if (cipher_ == WireCipher::kAes256Gcm) {
    CHORUS_CHECK(HasAesGcm());
    state_ = std::make_unique<State>();
    crypto_aead_aes256gcm_beforenm(&state_->aes, key_.data());
  }
}

WireSeal::~WireSeal() {
  sodium_memzero(key_.data(), key_.size());
  if (state_) sodium_memzero(state_.get(), sizeof(State));
}

void WireSeal::Seal(uint64_t sequence, const uint8_t* header, const std::byte* src, std::byte* dst,
                    size_t n, uint8_t* tag) {
  unsigned char nonce[12];
  Nonce(sequence, nonce);
  const auto* in = reinterpret_cast<const unsigned char*>(src);
  auto* out = reinterpret_cast<unsigned char*>(dst);
  switch (cipher_) {
    case WireCipher::kNone:
      return;
    case WireCipher::kPoly1305: {
      unsigned char one_time[crypto_onetimeauth_KEYBYTES];
      crypto_stream_chacha20_ietf(one_time, sizeof(one_time), nonce, key_.data());
      crypto_onetimeauth_state state;
      crypto_onetimeauth_init(&state, one_time);
      crypto_onetimeauth_update(&state, header, kFrameHeaderBytes);
      crypto_onetimeauth_update(&state, in, n);
      crypto_onetimeauth_final(&state, tag);
      sodium_memzero(one_time, sizeof(one_time));
      return;
    }
    case WireCipher::kAes256Gcm:
      crypto_aead_aes256gcm_encrypt_detached_afternm(out, tag, nullptr, in, n, header,
                                                     kFrameHeaderBytes, nullptr, nonce,
                                                     &state_->aes);
      return;
    case WireCipher::kChaCha20Poly1305:
      crypto_aead_chacha20poly1305_ietf_encrypt_detached(out, tag, nullptr, in, n, header,
                                                         kFrameHeaderBytes, nullptr, nonce,
                                                         key_.data());
      return;
  }
}

bool WireSeal::Open(uint64_t sequence, const uint8_t* header, std::byte* data, size_t n,
                    const uint8_t* tag) {
  unsigned char nonce[12];
  Nonce(sequence, nonce);
  auto* io = reinterpret_cast<unsigned char*>(data);
  switch (cipher_) {
    case WireCipher::kNone:
      return true;
    case WireCipher::kPoly1305: {
      unsigned char expected[crypto_onetimeauth_BYTES];
      Seal(sequence, header, data, data, n, expected);
      return crypto_verify_16(expected, tag) == 0;
    }
    case WireCipher::kAes256Gcm:
      return crypto_aead_aes256gcm_decrypt_detached_afternm(io, nullptr, io, n, tag, header,
                                                            kFrameHeaderBytes, nonce,
                                                            &state_->aes) == 0;
    case WireCipher::kChaCha20Poly1305:
      return crypto_aead_chacha20poly1305_ietf_decrypt_detached(
                 io, nullptr, io, n, tag, header, kFrameHeaderBytes, nonce, key_.data()) ==
             0;
  }
  return false;
}

}  // namespace chorus::internal::tcp
