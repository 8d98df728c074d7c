// PrefixStore and FormatDuration. TcpStore is in tcp_store.cc, TcpStoreServer in
// tcp_store_server.cc.
#include "worker/dist/store.h"

#include <sstream>

namespace trainyard::dist {

using std::chrono::milliseconds;

Status PrefixStore::Set(const std::string& key, const std::string& value) {
  return base_->Set(prefix_ + key, value);
}
StatusOr<std::string> PrefixStore::Get(const std::string& key, milliseconds timeout) {
  return base_->Get(prefix_ + key, timeout);
}
Status PrefixStore::Wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::vector<std::string> full;
  for (const std::string& k : keys) full.push_back(prefix_ + k);
  return base_->Wait(full, timeout);
}
StatusOr<int64_t> PrefixStore::Add(const std::string& key, int64_t delta) {
  return base_->Add(prefix_ + key, delta);
}

std::string FormatDuration(milliseconds d) {
  const int64_t ms = d.count();
  std::ostringstream out;
  if (ms < 1000 && ms > -1000) {
    out << ms << "ms";
  } else if (ms % 60000 == 0) {
    out << ms / 60000 << "m";
  } else {
    out << static_cast<double>(ms) / 1000.0 << "s";
  }
  return out.str();
}

}  // namespace trainyard::dist
