#include "worker/data/idx.h"

#include <cstdint>
#include <cstdio>

#include "worker/data/file_io.h"
#include "worker/tensor/factories.h"

namespace trainyard::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

uint32_t BigEndian32(const std::string& bytes, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + at;
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Checks the magic and returns the `ndims` sizes that follow it.
StatusOr<std::vector<uint32_t>> ReadHeader(const std::string& path, const std::string& bytes,
                                           uint32_t magic, size_t ndims, const char* what) {
  if (bytes.size() >= 4 && BigEndian32(bytes, 0) != magic) {
    return InvalidArgumentError(path + ": bad magic number " + Hex(BigEndian32(bytes, 0)) +
                                "; an IDX " + what + " file starts with " + Hex(magic));
  }
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) {
    return DataLossError(path + ": truncated: " + std::to_string(bytes.size()) +
                         " bytes, shorter than the " + std::to_string(header) +
                         "-byte header of an IDX " + what + " file");
  }
  std::vector<uint32_t> dims(ndims);
  for (size_t d = 0; d < ndims; ++d) {
    dims[d] = BigEndian32(bytes, 4 + 4 * d);
    if (dims[d] == 0) {
      return InvalidArgumentError(path + ": dimension " + std::to_string(d) + " is 0");
    }
  }
  return dims;
}

// The header says the payload is `payload` bytes; the file must hold exactly that.
Status CheckSize(const std::string& path, const std::string& bytes, size_t header,
                 unsigned __int128 payload) {
  const unsigned __int128 expected = header + payload;
  if (bytes.size() == expected) return OkStatus();
  const std::string expected_s = expected > UINT64_MAX
                                     ? std::string("more than 2^64")
                                     : std::to_string(static_cast<uint64_t>(expected));
  const char* what = bytes.size() < expected ? "truncated" : "has trailing bytes";
  return DataLossError(path + ": " + what + ": the header implies " + expected_s +
                       " bytes but the (decompressed) file has " + std::to_string(bytes.size()));
}

StatusOr<Tensor> ParseImages(const std::string& path, const IdxOptions& options) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path));
  ASSIGN_OR_RETURN(std::vector<uint32_t> dims, ReadHeader(path, bytes, kImagesMagic, 3, "images"));
  const unsigned __int128 payload =
      static_cast<unsigned __int128>(dims[0]) * dims[1] * static_cast<uint64_t>(dims[2]);
  RETURN_IF_ERROR(CheckSize(path, bytes, 16, payload));
  Tensor images = Empty({dims[0], 1, dims[1], dims[2]});
  float* out = images.data<float>();
  const auto* in = reinterpret_cast<const unsigned char*>(bytes.data()) + 16;
  const float scale = 1.0f / 255.0f;
  const float mean = options.normalize ? options.mean : 0.0f;
  const float inv_std = options.normalize ? 1.0f / options.std : 1.0f;
  const int64_t n = images.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = (in[i] * scale - mean) * inv_std;
  return images;
}

StatusOr<Tensor> ParseLabels(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path));
  ASSIGN_OR_RETURN(std::vector<uint32_t> dims, ReadHeader(path, bytes, kLabelsMagic, 1, "labels"));
  RETURN_IF_ERROR(CheckSize(path, bytes, 8, dims[0]));
  Tensor labels = Empty({dims[0]}, Options(DType::kInt64));
  int64_t* out = labels.data<int64_t>();
  const auto* in = reinterpret_cast<const unsigned char*>(bytes.data()) + 8;
  for (uint32_t i = 0; i < dims[0]; ++i) out[i] = in[i];
  return labels;
}

}  // namespace

StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                          const IdxOptions& options) {
  if (options.normalize && !(options.std > 0.0f)) {
    return InvalidArgumentError("idx options: std is " + std::to_string(options.std) +
                                "; it must be positive");
  }
  ASSIGN_OR_RETURN(Tensor images, ParseImages(images_path, options));
  ASSIGN_OR_RETURN(Tensor labels, ParseLabels(labels_path));
  if (images.size(0) != labels.size(0)) {
    return InvalidArgumentError(images_path + " holds " + std::to_string(images.size(0)) +
                                " images but " + labels_path + " holds " +
                                std::to_string(labels.size(0)) + " labels; they must match");
  }
  return Dataset(std::move(images), std::move(labels));
}

StatusOr<IdxPaths> FashionMnistPaths(const std::string& split, const std::string& dir) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    return InvalidArgumentError("fashion-mnist split \"" + split +
                                "\" is unknown; use \"train\" or \"test\"");
  }
  return IdxPaths{dir + "/" + prefix + "-images-idx3-ubyte.gz",
                  dir + "/" + prefix + "-labels-idx1-ubyte.gz"};
}

}  // namespace trainyard::data
