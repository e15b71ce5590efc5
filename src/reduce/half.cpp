// Software conversions between float32 and the 16-bit float formats (IEEE binary16, bfloat16).
//
// Integer-only, so results do not depend on the floating-point environment, and bit-exact with
// x86 F16C (vcvtph2ps / vcvtps2ph with round-to-nearest-even), which the reduction kernels use
// where available: both must give the same answer, or a rank with F16C and a rank without it
// would disagree on a reduced value. NaNs keep their sign and top payload bits and come out
// quiet, as F16C does.
#include <bit>
#include <cstdint>

#include "chorus/types.h"

namespace chorus {

float ToFloat(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) {  // inf, or NaN (made quiet)
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float32 (11 significant bits at most).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  // Rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float ToFloat(BFloat16 b) {
  uint32_t bits = static_cast<uint32_t>(b.bits) << 16;
  if ((bits & 0x7fffffffu) > 0x7f800000u) bits |= 0x400000u;  // quiet a signalling NaN
  return std::bit_cast<float>(bits);
}

Float16 ToFloat16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top 10 payload bits, set the quiet bit
    return {static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu))};
  }
  // 65520 is halfway between the largest half (65504) and 65536; the tie goes to the even
  // neighbour, which is the one past the end, so 65520 and above overflow to inf.
  if (magnitude >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};
  if (magnitude >= 0x38800000u) {
    // Normal half (>= 2^-14). Rebias 127 -> 15, then round away the low 13 mantissa bits to
    // nearest even; a carry out of the mantissa correctly bumps the exponent.
    const uint32_t rebiased = magnitude - (112u << 23);
    const uint32_t rounded = rebiased + 0xfffu + ((rebiased >> 13) & 1u);
    return {static_cast<uint16_t>(sign | (rounded >> 13))};
  }
  // Subnormal half: the result counts units of 2^-24. A normal float is
  // significand * 2^(exponent - 150) with a 24-bit significand, i.e. significand >> shift units
  // with shift = 126 - exponent (>= 14 here). Float subnormals are far below 2^-25 and round to 0.
  const uint32_t exponent = magnitude >> 23;
  const uint32_t shift = 126 - exponent;
  if (exponent == 0 || shift > 24) return {sign};
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  uint32_t units = significand >> shift;
  const uint32_t remainder = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (units & 1u))) ++units;
  // units may reach 0x400, which is exactly the encoding of the smallest normal half.
  return {static_cast<uint16_t>(sign | units)};
}

BFloat16 ToBFloat16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate the payload, set the quiet bit
    return {static_cast<uint16_t>((bits >> 16) | 0x40u)};
  }
  // Round the low 16 bits to nearest even; the carry handles exponent bumps and overflow to
  // inf (the largest floats round up to 0x7f80). No carry out of bit 31: NaNs are excluded.
  return {static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16)};
}

}  // namespace chorus
