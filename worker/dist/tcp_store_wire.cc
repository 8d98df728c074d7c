// Frames of the store protocol (Note [Store wire protocol] in tcp_store_wire.h).
#include "worker/dist/tcp_store_wire.h"

namespace trainyard::dist::store_internal {
namespace {

constexpr uint32_t kMaxFields = 1u << 16;
constexpr uint32_t kMaxFieldBytes = 1u << 30;

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

std::string EncodeFrame(const std::vector<std::string>& fields) {
  std::string out;
  PutU32(&out, static_cast<uint32_t>(fields.size()));
  for (const std::string& f : fields) {
    PutU32(&out, static_cast<uint32_t>(f.size()));
    out += f;
  }
  return out;
}

int64_t DecodeFrame(const std::string& buf, std::vector<std::string>* fields) {
  size_t pos = 0;
  if (buf.size() < 4) return 0;
  const uint32_t n = GetU32(buf.data());
  if (n > kMaxFields) return -1;
  pos = 4;
  fields->clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (buf.size() < pos + 4) return 0;
    const uint32_t len = GetU32(buf.data() + pos);
    if (len > kMaxFieldBytes) return -1;
    pos += 4;
    if (buf.size() < pos + len) return 0;
    fields->emplace_back(buf, pos, len);
    pos += len;
  }
  return static_cast<int64_t>(pos);
}

}  // namespace trainyard::dist::store_internal
