// 16-bit floating types stored as raw bits, with conversions to and from float.
// bfloat16 rounds to nearest even; float16 (IEEE binary16) handles subnormals, inf and nan.
#pragma once

#include <cstdint>
#include <cstring>

namespace trainyard {

struct BFloat16 {
  uint16_t bits = 0;
};
struct Half {
  uint16_t bits = 0;
};

inline float ToFloat(BFloat16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Branch-free (a select, not an early return), so loops over it vectorise.
inline BFloat16 ToBFloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
  const uint32_t nan = (u >> 16) | 0x40u;                           // stays a (quiet) nan
  return BFloat16{static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
}

inline float ToFloat(Half v) {
  uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t man = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    u = sign | ((112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline Half ToHalf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return Half{static_cast<uint16_t>(sign | 0x7e00u)};   // nan
  if (a >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow: inf
  if (a < 0x38800000u) {  // subnormal or zero in half
    if (a < 0x33000000u) return Half{sign};
    uint32_t e = a >> 23;
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14..24
    uint32_t half_man = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_man & 1u))) ++half_man;
    return Half{static_cast<uint16_t>(sign | half_man)};
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);  // rebias, round to nearest even
  return Half{static_cast<uint16_t>(sign | (r >> 13))};
}

}  // namespace trainyard
