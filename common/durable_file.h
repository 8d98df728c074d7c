// Small POSIX file helpers for writing checkpoints durably: a file's bytes and a directory's
// entries reach the disk before the caller goes on (fsync), so a crash right after a rename
// cannot leave a renamed directory whose files are empty.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"

namespace trainyard {

// Creates or truncates `path`, writes `bytes` and fsyncs the file. Errors name the path.
Status WriteFileSynced(const std::string& path, const std::string& bytes);

// fsyncs the directory `dir` so renames and new entries in it are durable. File systems that
// cannot sync a directory (EINVAL) are let be.
Status SyncDirectory(const std::string& dir);

// The one write-to-a-temporary-then-rename: replaces `path` with the file `write` makes at
// `tmp` (a path in the same directory): `tmp` is fsynced, renamed over `path` and the directory
// fsynced, so a reader sees the old file or the new, never a part, even after a crash. When
// `write` or a step fails, `tmp` is removed and `path` is as it was; the error is write's, or
// names the step and the path.
Status ReplaceFile(const std::string& path, const std::string& tmp,
                   const std::function<Status(const std::string& tmp)>& write);

// Replaces `path` with `bytes` whole (ReplaceFile through `path`.tmp-<pid>). Errors name the
// path.
Status WriteFileAtomically(const std::string& path, const std::string& bytes);

// The whole contents of `path`. Errors name the path.
StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace trainyard
