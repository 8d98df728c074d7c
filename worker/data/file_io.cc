#include "worker/data/file_io.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#ifdef TY_HAVE_ZLIB
#include <zlib.h>
#endif

#include "common/durable_file.h"

namespace trainyard::data {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

Status OpenError(const std::string& path, int err) {
  std::string m = path + ": cannot open: " + std::strerror(err);
  return err == ENOENT ? NotFoundError(m) : FailedPreconditionError(m);
}

// An out-parameter rather than StatusOr<std::string>: GCC 12 misreports the moved string as
// maybe-uninitialized.
// Data is read whole, so only a regular file will do: /dev/zero or a FIFO would be read until
// memory runs out or for ever, a directory not at all. Checked before the open, which blocks on
// a FIFO without a writer.
Status CheckRegular(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return OpenError(path, errno);
  if (S_ISREG(st.st_mode)) return OkStatus();
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  return FailedPreconditionError(path + " is " + kind + "; data must be a regular file");
}

Status ReadRaw(const std::string& path, std::string* out) {
  RETURN_IF_ERROR(CheckRegular(path));
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) return OpenError(path, errno);
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) out->append(buf, n);
  if (std::ferror(f.get())) {
    return DataLossError(path + ": read failed: " + std::strerror(errno));
  }
  return OkStatus();
}

bool IsGzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

#ifdef TY_HAVE_ZLIB
// Inflates one or more concatenated gzip members held in `gz`.
StatusOr<std::string> Gunzip(const std::string& path, const std::string& gz) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return InternalError(path + ": zlib inflateInit2 failed");
  }
  size_t fed = 0;  // bytes of `gz` handed to zlib so far (avail_in is 32-bit)
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (true) {
    if (zs.avail_in == 0 && fed < gz.size()) {
      const size_t chunk = std::min<size_t>(gz.size() - fed, size_t{1} << 30);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data() + fed));
      zs.avail_in = static_cast<uInt>(chunk);
      fed += chunk;
    }
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
    const bool more_input = zs.avail_in > 0 || fed < gz.size();
    if (rc == Z_STREAM_END && more_input) {
      rc = inflateReset(&zs);  // another gzip member follows
      if (rc != Z_OK) break;
    } else if (rc != Z_OK) {
      break;
    }
  }
  std::string zmsg = zs.msg ? zs.msg : "zlib error";
  inflateEnd(&zs);
  if (rc == Z_STREAM_END) return out;
  if (rc == Z_BUF_ERROR) {
    return DataLossError(path + ": truncated gzip data (the compressed stream ends after " +
                         std::to_string(out.size()) + " decompressed bytes)");
  }
  return DataLossError(path + ": corrupt gzip data: " + zmsg);
}
#endif

}  // namespace

bool HaveZlib() {
#ifdef TY_HAVE_ZLIB
  return true;
#else
  return false;
#endif
}

StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::string bytes;
  RETURN_IF_ERROR(ReadRaw(path, &bytes));
  if (!IsGzip(bytes)) return bytes;
#ifdef TY_HAVE_ZLIB
  return Gunzip(path, bytes);
#else
  return FailedPreconditionError(path +
                                 ": is gzip-compressed but this build has no zlib; install "
                                 "zlib1g-dev and rebuild, or gunzip the file first");
#endif
}

Status WriteFileBytes(const std::string& path, const std::string& bytes) {
  return WriteFileAtomically(path, bytes);
}

}  // namespace trainyard::data
