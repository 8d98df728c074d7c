// Small POSIX file helpers for writing checkpoints durably: a file's bytes and a directory's
// entries reach the disk before the caller goes on (fsync), so a crash right after a rename
// cannot leave a renamed directory whose files are empty.
#pragma once

#include <string>

#include "common/status.h"

namespace trainyard::trainer {

// Creates or truncates `path`, writes `bytes` and fsyncs the file. Errors name the path.
Status WriteFileSynced(const std::string& path, const std::string& bytes);

// fsyncs the directory `dir` so renames and new entries in it are durable. File systems that
// cannot sync a directory (EINVAL) are let be.
Status SyncDirectory(const std::string& dir);

// The whole contents of `path`. Errors name the path.
StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace trainyard::trainer
