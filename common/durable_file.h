// Small POSIX file helpers for writing checkpoints durably: a file's bytes and a directory's
// entries reach the disk before the caller goes on (fsync), so a crash right after a rename
// cannot leave a renamed directory whose files are empty.
#pragma once

#include <string>

#include "common/status.h"

namespace trainyard {

// Creates or truncates `path`, writes `bytes` and fsyncs the file. Errors name the path.
Status WriteFileSynced(const std::string& path, const std::string& bytes);

// fsyncs the directory `dir` so renames and new entries in it are durable. File systems that
// cannot sync a directory (EINVAL) are let be.
Status SyncDirectory(const std::string& dir);

// Replaces `path` with `bytes` whole: written and fsynced as `path`.tmp-<pid> beside it, renamed
// over it, and the directory fsynced; a reader sees the old contents or the new, never a part.
// On an error the temporary is removed and `path` is as it was. Errors name the path.
Status WriteFileAtomically(const std::string& path, const std::string& bytes);

// The whole contents of `path`. Errors name the path.
StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace trainyard
