#include "client/spec_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>

#include "client/yaml.h"

namespace trainyard::client {

namespace {

// Up to `limit` bytes of the file at `path`: fewer only when the file ends first.
StatusOr<std::string> ReadAtMost(const std::string& path, size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening job spec " + path);
  std::string text(limit, '\0');
  size_t size = 0;
  while (size < limit) {
    const ssize_t n = ::read(fd, text.data() + size, limit - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status error = ErrnoStatus("reading job spec " + path);
      ::close(fd);
      return error;
    }
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(size);
  return text;
}

}  // namespace

StatusOr<Json> ReadSpecFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadAtMost(path, kMaxSpecFileBytes + 1));
  if (text.size() > kMaxSpecFileBytes) {
    return InvalidArgumentError("job spec " + path + " is larger than " +
                                std::to_string(kMaxSpecFileBytes) +
                                " bytes (1 MiB), the most a spec may hold");
  }
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (!json) return ParseYaml(text, path);
  StatusOr<Json> parsed = Json::Parse(text);
  if (!parsed.ok())
    return InvalidArgumentError(path + ": " + std::string(parsed.status().message()));
  return parsed;
}

Status ApplyOverride(std::string_view assignment, Json* spec) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return InvalidArgumentError("--set " + std::string(assignment) +
                                ": expected path=value, e.g. --set optimizer.sgd.lr=0.05");
  }
  const std::string path(assignment.substr(0, eq));
  Json* node = spec;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty())
      return InvalidArgumentError("--set " + path + ": empty field name in the path");
    if (node->is_null()) *node = Json::Object();
    if (!node->is_object()) {
      return InvalidArgumentError("--set " + path + ": " + path.substr(0, start - 1) +
                                  " is not a mapping");
    }
    if (dot == std::string::npos) {
      node->Set(key, ParsePlainScalar(assignment.substr(eq + 1)));
      return OkStatus();
    }
    if (node->Find(key) == nullptr) node->Set(key, Json::Object());
    node = node->Find(key);
    start = dot + 1;
  }
}

StatusOr<Json> LoadSpecJson(const std::string& path, const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(Json json, ReadSpecFile(path));
  for (const std::string& o : overrides) RETURN_IF_ERROR(ApplyOverride(o, &json));
  return json;
}

StatusOr<spec::JobSpec> ParseSpecJson(const std::string& path, const Json& json) {
  StatusOr<spec::JobSpec> spec = spec::ParseJobSpec(json);
  if (!spec.ok()) return InvalidArgumentError(path + ": " + std::string(spec.status().message()));
  return spec;
}

StatusOr<spec::JobSpec> LoadJobSpec(const std::string& path,
                                    const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(Json json, LoadSpecJson(path, overrides));
  return ParseSpecJson(path, json);
}

bool SetsField(const Json& json, std::string_view path) {
  const Json* node = &json;
  for (size_t start = 0; node != nullptr;) {
    const size_t dot = path.find('.', start);
    const std::string key(
        path.substr(start, dot == std::string_view::npos ? path.npos : dot - start));
    if (!node->is_object()) return false;
    std::string camel;
    for (size_t i = 0; i < key.size(); ++i) {
      camel += key[i] == '_' && i + 1 < key.size()
                   ? static_cast<char>(std::toupper(static_cast<unsigned char>(key[++i])))
                   : key[i];
    }
    const Json* next = node->Find(key);
    if (next == nullptr || next->is_null()) next = node->Find(camel);
    node = next;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return node != nullptr && !node->is_null();
}

}  // namespace trainyard::client
