#include "worker/tensor/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <unordered_set>

#include "common/durable_file.h"
#include "common/json.h"

namespace trainyard {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and is read and written as raw bytes here");

// The reference implementation refuses larger headers (a guard against absurd allocations).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeCode {
  DType dtype;
  const char* code;
};
constexpr DTypeCode kDTypeCodes[] = {
    {DType::kFloat32, "F32"}, {DType::kFloat64, "F64"}, {DType::kBFloat16, "BF16"},
    {DType::kFloat16, "F16"}, {DType::kInt64, "I64"},   {DType::kInt32, "I32"},
    {DType::kUInt8, "U8"},    {DType::kBool, "BOOL"},
};

const char* CodeOf(DType dtype) {
  for (const DTypeCode& c : kDTypeCodes) {
    if (c.dtype == dtype) return c.code;
  }
  TY_CHECK(false) << "no safetensors code for dtype " << DTypeName(dtype);
  return "";
}

std::string Quoted(const std::string& s) { return Json(s).Dump(); }

// "[2, -1]"
std::string ListText(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string Range(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

// ---- Save ----

Status CheckTensors(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::unordered_set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (name == kMetadataKey) {
      return InvalidArgumentError("the tensor name \"__metadata__\" is reserved for metadata");
    }
    if (!names.insert(name).second) {
      return InvalidArgumentError("tensor name " + Quoted(name) + " appears twice");
    }
    if (!t.defined()) return InvalidArgumentError("tensor " + Quoted(name) + " is undefined");
  }
  return OkStatus();
}

// Two tensors whose bytes overlap in one storage would be written twice and load as two
// independent tensors, silently breaking the tie; PyTorch's safetensors refuses them too.
Status CheckNoSharedMemory(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  struct Extent {
    const Storage* storage;
    int64_t begin, end;  // elements of the storage that the tensor can touch: [begin, end)
    size_t index;
  };
  std::vector<Extent> extents;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    if (t.numel() == 0) continue;
    int64_t lo = t.offset(), hi = t.offset();
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t span = (t.size(d) - 1) * t.stride(d);
      (span < 0 ? lo : hi) += span;
    }
    extents.push_back({t.storage().get(), lo, hi + 1, i});
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.storage != b.storage ? std::less<>()(a.storage, b.storage) : a.begin < b.begin;
  });
  for (size_t k = 1, widest = 0; k < extents.size(); ++k) {
    if (extents[k].storage != extents[widest].storage) {
      widest = k;
      continue;
    }
    if (extents[k].begin < extents[widest].end) {
      return InvalidArgumentError(
          "tensors " + Quoted(tensors[extents[widest].index].first) + " and " +
          Quoted(tensors[extents[k].index].first) +
          " share memory; safetensors stores every tensor separately, so save one of them, or "
          "a copy (ConvertTo(t, t.dtype(), /*force_copy=*/true))");
    }
    if (extents[k].end > extents[widest].end) widest = k;
  }
  return OkStatus();
}

uint64_t ByteSize(const Tensor& t) { return t.numel() * ElementSize(t.dtype()); }

// The JSON header, padded with spaces to a multiple of 8 bytes.
std::string BuildHeader(const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  Json::Members members;
  if (!metadata.empty()) {
    Json::Members entries;
    for (const auto& [key, value] : metadata) entries.emplace_back(key, Json(value));
    members.emplace_back(kMetadataKey, Json::Object(std::move(entries)));
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    Json::Items shape(t.shape().begin(), t.shape().end());
    const uint64_t end = offset + ByteSize(t);
    members.emplace_back(name, Json::Object({{"dtype", CodeOf(t.dtype())},
                                             {"shape", Json::Array(std::move(shape))},
                                             {"data_offsets", Json::Array({offset, end})}}));
    offset = end;
  }
  std::string header = Json::Object(std::move(members)).Dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

Status WriteBytes(FILE* f, const void* data, size_t n, const std::string& tmp) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n) return ErrnoStatus("writing " + Quoted(tmp));
  return OkStatus();
}

// Header length, header and data, then flushed (the caller closes `f`; ReplaceFile fsyncs).
Status WriteContents(FILE* f, const std::string& tmp, const std::string& header,
                     const std::vector<std::pair<std::string, Tensor>>& tensors) {
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  RETURN_IF_ERROR(WriteBytes(f, length, sizeof(length), tmp));
  RETURN_IF_ERROR(WriteBytes(f, header.data(), header.size(), tmp));
  for (const auto& named : tensors) {
    const Tensor& t = named.second;
    const Tensor data = t.device().is_cpu() ? ContiguousData(t) : CopyToDevice(t, Device::Cpu());
    RETURN_IF_ERROR(WriteBytes(f, data.raw_data(), ByteSize(data), tmp));
  }
  if (std::fflush(f) != 0) return ErrnoStatus("writing " + Quoted(tmp));
  return OkStatus();
}

Status SaveImpl(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                const std::map<std::string, std::string>& metadata) {
  RETURN_IF_ERROR(CheckTensors(tensors));
  RETURN_IF_ERROR(CheckNoSharedMemory(tensors));
  const std::string header = BuildHeader(tensors, metadata);
  // Streamed to the temporary: the tensors are never copied into one buffer.
  return ReplaceFile(path, path + ".tmp." + std::to_string(::getpid()),
                     [&](const std::string& tmp) {
                       FILE* f = std::fopen(tmp.c_str(), "wb");
                       if (f == nullptr) return ErrnoStatus("creating " + Quoted(tmp));
                       Status s = WriteContents(f, tmp, header, tensors);
                       if (std::fclose(f) != 0 && s.ok()) s = ErrnoStatus("closing " + Quoted(tmp));
                       return s;
                     });
}

// ---- Load ----

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // bytes from the start of the data
};

Status ReadExactly(FILE* f, void* out, size_t n, const std::string& what) {
  if (n == 0 || std::fread(out, 1, n, f) == n) return OkStatus();
  if (std::ferror(f)) return ErrnoStatus("reading " + what);
  return DataLossError("reading " + what + ": the file ended early; was it changed while read?");
}

// The header text after checking the length prefix against the file size.
StatusOr<std::string> ReadHeader(FILE* f, uint64_t file_size) {
  if (file_size < 8) {
    return DataLossError("the file is " + std::to_string(file_size) +
                         " bytes, too short for the 8-byte header length that starts a "
                         "safetensors file");
  }
  unsigned char length[8];
  RETURN_IF_ERROR(ReadExactly(f, length, 8, "the header length"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
  if (n > kMaxHeaderBytes) {
    return DataLossError("header length " + std::to_string(n) + " is above the limit of " +
                         std::to_string(kMaxHeaderBytes) +
                         " bytes; the file is corrupt or not a safetensors file");
  }
  if (n > file_size - 8) {
    return DataLossError("header length " + std::to_string(n) +
                         " goes beyond the end of the file (" + std::to_string(file_size) +
                         " bytes); the file is truncated or not a safetensors file");
  }
  std::string header(n, '\0');
  RETURN_IF_ERROR(ReadExactly(f, header.data(), n, "the header"));
  return header;
}

StatusOr<DType> DTypeFromCode(const std::string& code) {
  for (const DTypeCode& c : kDTypeCodes) {
    if (code == c.code) return c.dtype;
  }
  return UnimplementedError(
      "dtype " + Quoted(code) +
      " is not supported; supported: F32, F64, BF16, F16, I64, I32, U8, BOOL");
}

// Bytes of a tensor of shape `dims` (checked: rank, non-negative sizes, no overflow).
StatusOr<uint64_t> CheckedByteSize(const std::vector<int64_t>& dims, DType dtype) {
  if (dims.size() > static_cast<size_t>(kMaxDims)) {
    return UnimplementedError("shape has " + std::to_string(dims.size()) +
                              " dimensions; trainyard tensors have at most " +
                              std::to_string(kMaxDims));
  }
  uint64_t nbytes = ElementSize(dtype);
  for (int64_t d : dims) {
    if (d < 0) return InvalidArgumentError("shape " + ListText(dims) + " has a negative size");
    if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(d), &nbytes)) {
      return InvalidArgumentError("shape " + ListText(dims) + " is too large");
    }
  }
  return nbytes;
}

// One header entry, checked on its own (the layout check looks at all of them together).
StatusOr<Entry> ParseEntry(const std::string& name, const Json& info) {
  if (!info.is_object()) {
    std::string text = info.Dump();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return InvalidArgumentError("expected an object with dtype, shape and data_offsets, got " +
                                text);
  }
  ASSIGN_OR_RETURN(std::string code, info.Get<std::string>("dtype"));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, info.Get<std::vector<int64_t>>("shape"));
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, info.Get<std::vector<int64_t>>("data_offsets"));
  ASSIGN_OR_RETURN(DType dtype, DTypeFromCode(code));
  ASSIGN_OR_RETURN(uint64_t nbytes, CheckedByteSize(dims, dtype));
  if (offsets.size() != 2 || offsets[0] < 0 || offsets[1] < offsets[0]) {
    return InvalidArgumentError("data_offsets " + ListText(offsets) +
                                " must be [begin, end] with 0 <= begin <= end");
  }
  Entry e{name, dtype, Shape(dims), static_cast<uint64_t>(offsets[0]),
          static_cast<uint64_t>(offsets[1])};
  if (e.end - e.begin != nbytes) {
    return InvalidArgumentError("shape " + e.shape.ToString() + " of " + code + " needs " +
                                std::to_string(nbytes) + " bytes, but data_offsets " +
                                Range(e.begin, e.end) + " hold " + std::to_string(e.end - e.begin));
  }
  return e;
}

// Fills `metadata` from "__metadata__" and returns the tensors in header order.
StatusOr<std::vector<Entry>> ParseHeader(const std::string& text,
                                         std::map<std::string, std::string>* metadata) {
  StatusOr<Json> header = Json::Parse(text);
  if (!header.ok()) return DataLossError("the header is not valid: " + header.status().message());
  if (!header->is_object()) return DataLossError("the header is not a json object");
  std::vector<Entry> entries;
  for (const auto& [name, value] : header->members()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) return DataLossError("\"__metadata__\" is not a json object");
      for (const auto& [key, v] : value.members()) {
        if (!v.is_string()) {
          return DataLossError("\"__metadata__\" value of " + Quoted(key) + " is " + v.Dump() +
                               ", not a string");
        }
        (*metadata)[key] = v.string_value();
      }
      continue;
    }
    StatusOr<Entry> e = ParseEntry(name, value);
    if (!e.ok()) {
      const bool unsupported = e.status().code() == StatusCode::kUnimplemented;
      return Status(unsupported ? StatusCode::kUnimplemented : StatusCode::kDataLoss,
                    "tensor " + Quoted(name) + ": " + e.status().message());
    }
    entries.push_back(std::move(*e));
  }
  return entries;
}

// Indices of `entries` by data offset, after checking that they tile [0, data_size) exactly.
StatusOr<std::vector<size_t>> CheckLayout(const std::vector<Entry>& entries, uint64_t data_size) {
  for (const Entry& e : entries) {
    if (e.end > data_size) {
      return DataLossError("tensor " + Quoted(e.name) + ": data_offsets " + Range(e.begin, e.end) +
                           " go beyond the end of the data (" + std::to_string(data_size) +
                           " bytes after the header); the file is truncated");
    }
  }
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(entries[a].begin, entries[a].end) <
           std::make_pair(entries[b].begin, entries[b].end);
  });
  uint64_t covered = 0;  // bytes [0, covered) belong to tensors seen so far
  const Entry* last = nullptr;
  for (size_t i : order) {
    const Entry& e = entries[i];
    if (e.begin < covered) {
      return DataLossError("tensors " + Quoted(last->name) + " " + Range(last->begin, last->end) +
                           " and " + Quoted(e.name) + " " + Range(e.begin, e.end) +
                           " overlap in the data");
    }
    if (e.begin > covered) {
      return DataLossError("data bytes [" + std::to_string(covered) + ", " +
                           std::to_string(e.begin) + ") belong to no tensor");
    }
    covered = e.end, last = &e;
  }
  if (covered != data_size) {
    return DataLossError(std::to_string(data_size - covered) +
                         " trailing bytes after the last tensor (tensors end at " +
                         std::to_string(covered) + ", the data has " + std::to_string(data_size) +
                         " bytes)");
  }
  return order;
}

StatusOr<Tensor> ReadTensor(FILE* f, uint64_t data_start, const Entry& e) {
  Tensor t = Empty(e.shape, Options(e.dtype));
  const size_t n = e.end - e.begin;
  if (n == 0) return t;
  if (::fseeko(f, static_cast<off_t>(data_start + e.begin), SEEK_SET) != 0) {
    return ErrnoStatus("seeking to tensor " + Quoted(e.name));
  }
  RETURN_IF_ERROR(ReadExactly(f, t.raw_data(), n, "tensor " + Quoted(e.name)));
  if (e.dtype == DType::kBool) {
    const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
    const auto* bad = std::find_if(bytes, bytes + n, [](unsigned char b) { return b > 1; });
    if (bad != bytes + n) {
      return DataLossError("tensor " + Quoted(e.name) + ": element " + std::to_string(bad - bytes) +
                           " is byte " + std::to_string(*bad) + "; bool elements must be 0 or 1");
    }
  }
  return t;
}

StatusOr<SafetensorsFile> LoadImpl(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (f == nullptr) return ErrnoStatus("cannot open the file");
  struct stat st;
  if (::fstat(::fileno(f.get()), &st) != 0) return ErrnoStatus("cannot stat the file");
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError("not a regular file");
  const uint64_t file_size = st.st_size;
  ASSIGN_OR_RETURN(std::string header, ReadHeader(f.get(), file_size));
  SafetensorsFile out;
  ASSIGN_OR_RETURN(std::vector<Entry> entries, ParseHeader(header, &out.metadata));
  const uint64_t data_start = 8 + header.size();
  ASSIGN_OR_RETURN(std::vector<size_t> order, CheckLayout(entries, file_size - data_start));
  out.tensors.resize(entries.size());
  for (size_t i : order) {  // in data order, so the file is read front to back
    ASSIGN_OR_RETURN(Tensor t, ReadTensor(f.get(), data_start, entries[i]));
    out.tensors[i] = {entries[i].name, std::move(t)};
  }
  return out;
}

}  // namespace

Status SaveSafetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  return SaveImpl(path, tensors, metadata).WithContext("saving " + Quoted(path));
}

StatusOr<SafetensorsFile> LoadSafetensors(const std::string& path) {
  StatusOr<SafetensorsFile> file = LoadImpl(path);
  if (!file.ok()) return file.status().WithContext("loading " + Quoted(path));
  return file;
}

}  // namespace trainyard
