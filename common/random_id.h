// Random identifiers from the OS's entropy: run ids, rendezvous secrets.
#pragma once

#include <random>
#include <string>

namespace trainyard {

// `digits` random lowercase hex digits (4 bits of entropy each).
inline std::string RandomHex(int digits) {
  std::random_device device;
  std::uniform_int_distribution<int> digit(0, 15);
  std::string s;
  for (int i = 0; i < digits; ++i) s += "0123456789abcdef"[digit(device)];
  return s;
}

}  // namespace trainyard
