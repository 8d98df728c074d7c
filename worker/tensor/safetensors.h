// Safetensors: the checkpoint format of Hugging Face and PyTorch (the `safetensors` package),
// so that weights move between Trainyard and PyTorch in both directions. A file is
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   JSON header: {"__metadata__": {string: string},
//                           "<name>": {"dtype": "F32", "shape": [2, 3],
//                                      "data_offsets": [begin, end]}, ...}
//             padded with spaces to a multiple of 8, as the reference writer does
//   the data  each tensor's elements, little-endian and row-major, back to back; data_offsets
//             count bytes from the first byte after the header.
// Supported dtypes: F32, F64, BF16, F16, I64, I32, U8, BOOL.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/tensor/tensor.h"

namespace trainyard {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order of the file's header
  std::map<std::string, std::string> metadata;          // the "__metadata__" entry, if any
};

// Writes `tensors` in the given order (any supported dtype, on any device: device tensors are
// copied to the CPU first; non-contiguous ones are written in logical row-major order) and
// `metadata` to `path`. Atomic: the bytes go to "<path>.tmp.<pid>", which is flushed and
// fsync'ed, renamed over `path`, and then the directory is fsync'ed; on failure `path` is
// untouched and the temporary file removed. Two saves to the same path from one process must not
// run concurrently.
// Errors: InvalidArgument for a repeated or reserved ("__metadata__") name, an undefined tensor,
// or two tensors sharing memory (safetensors stores each tensor on its own, as PyTorch's
// safetensors also insists); the errno's code (NotFound, PermissionDenied, ResourceExhausted,
// Internal) for I/O failures.
Status SaveSafetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads a whole safetensors file into new CPU tensors. The header and layout are validated
// like the reference reader does: the header must fit in the file, be a JSON object, name a
// known dtype, shape and data_offsets for every tensor, and the tensors must tile the data
// exactly (no overlap, gap, out-of-range offset or trailing byte); bool bytes must be 0 or 1.
// Errors name the path: NotFound/PermissionDenied when it cannot be opened, InvalidArgument
// when it is not a regular file, DataLoss for a corrupt or truncated file, Unimplemented for a
// dtype or rank Trainyard does not support.
StatusOr<SafetensorsFile> LoadSafetensors(const std::string& path);

}  // namespace trainyard
