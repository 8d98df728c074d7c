// Whole-file reads and writes for the dataset loaders. Reads decompress gzip transparently
// (detected by the gzip magic bytes 1f 8b, not by the file name), so loaders accept either form.
#pragma once

#include <string>

#include "common/status.h"

namespace trainyard::data {

// The contents of `path`, decompressed when it is gzip. Errors name the path: NotFound for a
// missing file, DataLoss for corrupt or truncated gzip, FailedPrecondition for a gzip file in a
// build without zlib and for anything but a regular file (/dev/zero, a FIFO, a directory).
StatusOr<std::string> ReadFileBytes(const std::string& path);

// Writes `bytes` to `path` through a temporary file beside it and a rename, so a reader never
// sees a half-written file.
Status WriteFileBytes(const std::string& path, const std::string& bytes);

// True when this build links zlib and can read gzip files.
bool HaveZlib();

}  // namespace trainyard::data
