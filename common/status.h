// Status and StatusOr<T>: failures that can happen in production (bad input, I/O, peers,
// timeouts) are returned as values with a canonical code. The codes and their numbers match
// absl::StatusCode and grpc::StatusCode, so adapters at the wire translate one to one.
// The engine builds without abseil (GPU check machines lack it), hence this small copy.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/check.h"

namespace trainyard {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

const char* StatusCodeName(StatusCode code);

// One bad field of a request and what is wrong with it, for a caller that wants the problems
// one by one (google.rpc.BadRequest's FieldViolation at the gRPC boundary, proto/rpc.h).
struct FieldViolation {
  std::string field;        // the field's path: "model.gpt.n_head", "optimizer"; "" for the whole
  std::string description;  // what is wrong, without the path
  friend bool operator==(const FieldViolation& a, const FieldViolation& b) {
    return a.field == b.field && a.description == b.description;
  }
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;
  // Prepends context: "loading x: <old message>". Keeps the code and the field violations.
  Status WithContext(const std::string& context) const;

  // The problems behind the message, field by field (empty unless attached). The message
  // stays the whole story for a reader; these are for programs.
  const std::vector<FieldViolation>& field_violations() const;
  Status WithFieldViolations(std::vector<FieldViolation> violations) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::shared_ptr<const std::vector<FieldViolation>> violations_;  // null: none
};

std::ostream& operator<<(std::ostream& os, const Status& s);

inline Status OkStatus() { return Status(); }
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status UnknownError(std::string m) { return {StatusCode::kUnknown, std::move(m)}; }
inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status DeadlineExceededError(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExistsError(std::string m) {
  return {StatusCode::kAlreadyExists, std::move(m)};
}
inline Status PermissionDeniedError(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status UnauthenticatedError(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status UnimplementedError(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }

// A status for the system call that just failed: `what` + ": " + strerror(errno), with the
// canonical code for errno (NotFound, PermissionDenied, ResourceExhausted, AlreadyExists,
// else Internal). Call it right after the failure, before errno can change.
Status ErrnoStatus(const std::string& what);

// Either a value or a non-OK status. Reading the value of an error is a bug (TY_CHECK).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit like absl
    TY_CHECK(!status_.ok()) << "StatusOr built from an OK status without a value";
  }
  StatusOr(Status&& status) : status_(std::move(status)) {  // NOLINT
    TY_CHECK(!status_.ok()) << "StatusOr built from an OK status without a value";
  }
  // std::in_place: T may itself be an optional, and StatusOr<std::optional<X>>(std::nullopt)
  // must hold an empty X, not be empty.
  StatusOr(const T& value) : value_(std::in_place, value) {}        // NOLINT
  StatusOr(T&& value) : value_(std::in_place, std::move(value)) {}  // NOLINT
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status>>>
  StatusOr(U&& value) : value_(std::in_place, std::forward<U>(value)) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  const T& value() const& { return CheckedValue(), *value_; }
  T& value() & { return CheckedValue(), *value_; }
  T&& value() && { return CheckedValue(), std::move(*value_); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckedValue() const {
    TY_CHECK(status_.ok()) << "value() of a StatusOr holding " << status_.ToString();
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace trainyard

#define TY_STATUS_CONCAT_INNER(a, b) a##b
#define TY_STATUS_CONCAT(a, b) TY_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::trainyard::Status ty_status_tmp_ = (expr);     \
    if (!ty_status_tmp_.ok()) return ty_status_tmp_; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, F()); declares/assigns x from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  TY_ASSIGN_OR_RETURN_IMPL(TY_STATUS_CONCAT(ty_statusor_, __LINE__), lhs, expr)
#define TY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
