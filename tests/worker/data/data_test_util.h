// Helpers for the data tests: a temporary directory removed afterwards, and writers for raw,
// gzip and IDX fixtures. Tests build every fixture they read; none reads the real datasets.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/testing/temp_dir.h"

#ifdef TY_HAVE_ZLIB
#include <zlib.h>
#endif

namespace trainyard::data::testing {

using ::trainyard::testing::TempDir;

inline void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "writing " << path;
}

// The bytes of `path` as stored (no decompression); empty when it cannot be read.
inline std::string ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

#ifdef TY_HAVE_ZLIB
inline void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << "gzopen " << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}
#endif

inline void PutBigEndian32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out->push_back(static_cast<char>((v >> shift) & 0xff));
}

// An IDX images file: magic 0x803, n, rows, cols, then the pixels.
inline std::string IdxImages(uint32_t n, uint32_t rows, uint32_t cols,
                             const std::vector<uint8_t>& pixels) {
  std::string out;
  PutBigEndian32(&out, 0x803);
  PutBigEndian32(&out, n);
  PutBigEndian32(&out, rows);
  PutBigEndian32(&out, cols);
  out.append(pixels.begin(), pixels.end());
  return out;
}

// An IDX labels file: magic 0x801, n, then the labels.
inline std::string IdxLabels(const std::vector<uint8_t>& labels) {
  std::string out;
  PutBigEndian32(&out, 0x801);
  PutBigEndian32(&out, static_cast<uint32_t>(labels.size()));
  out.append(labels.begin(), labels.end());
  return out;
}

// Writes `bytes` gzip-compressed when this build has zlib, raw otherwise; returns the path.
inline std::string WriteMaybeGzip(const TempDir& dir, const std::string& name,
                                  const std::string& bytes) {
#ifdef TY_HAVE_ZLIB
  const std::string path = dir.File(name + ".gz");
  WriteGzip(path, bytes);
#else
  const std::string path = dir.File(name);
  WriteRaw(path, bytes);
#endif
  return path;
}

// True when `haystack` contains `needle` (for gtest messages: EXPECT_TRUE(Has(...)) << s).
inline bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace trainyard::data::testing
