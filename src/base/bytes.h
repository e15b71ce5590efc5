// Integers in network byte order (big-endian) inside byte buffers: the one codec of the TCP
// frames (transport/tcp/frame.cpp), the store's protocol (rendezvous/tcp_protocol.h) and the
// handshake (net/auth.cpp).
//
//   uint8_t header[8];  PutU64(header, sequence);  GetU64(header) == sequence
//   std::string out;    PutU32(&out, magic);       LoadU32(out.data()) == magic
//
// Thread safety: pure functions.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>

namespace chorus::internal {

namespace bytes_detail {
template <std::unsigned_integral T>
void Store(unsigned char* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    p[i] = static_cast<unsigned char>(v >> (8 * (sizeof(T) - 1 - i)));
  }
}
template <std::unsigned_integral T>
T Load(const unsigned char* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v = static_cast<T>((v << 8) | p[i]);
  return v;
}
template <std::unsigned_integral T>
void Append(std::string* out, T v) {
  unsigned char bytes[sizeof(T)];
  Store(bytes, v);
  out->append(reinterpret_cast<const char*>(bytes), sizeof(T));
}
}  // namespace bytes_detail

// Into and out of a byte array.
inline void PutU16(uint8_t* p, uint16_t v) { bytes_detail::Store(p, v); }
inline void PutU32(uint8_t* p, uint32_t v) { bytes_detail::Store(p, v); }
inline void PutU64(uint8_t* p, uint64_t v) { bytes_detail::Store(p, v); }
inline uint16_t GetU16(const uint8_t* p) { return bytes_detail::Load<uint16_t>(p); }
inline uint32_t GetU32(const uint8_t* p) { return bytes_detail::Load<uint32_t>(p); }
inline uint64_t GetU64(const uint8_t* p) { return bytes_detail::Load<uint64_t>(p); }

// Appended to a string, and read from a string's characters.
inline void PutU16(std::string* out, uint16_t v) { bytes_detail::Append(out, v); }
inline void PutU32(std::string* out, uint32_t v) { bytes_detail::Append(out, v); }
inline void PutU64(std::string* out, uint64_t v) { bytes_detail::Append(out, v); }
inline uint16_t LoadU16(const char* p) {
  return bytes_detail::Load<uint16_t>(reinterpret_cast<const unsigned char*>(p));
}
inline uint32_t LoadU32(const char* p) {
  return bytes_detail::Load<uint32_t>(reinterpret_cast<const unsigned char*>(p));
}
inline uint64_t LoadU64(const char* p) {
  return bytes_detail::Load<uint64_t>(reinterpret_cast<const unsigned char*>(p));
}

}  // namespace chorus::internal
