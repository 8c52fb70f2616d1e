// Status and Result<T>: errors as values on hot paths and across process boundaries.
// Exceptions are only used at start-up and while loading configuration.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace shoal {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller's input is wrong (HTTP 400)
  kNotFound,           // HTTP 404
  kAlreadyExists,      // HTTP 409
  kResourceExhausted,  // pool full, queue full (HTTP 503)
  kUnavailable,        // peer gone, instance crashed (HTTP 502/503)
  kDeadlineExceeded,   // HTTP 504
  kTooLarge,           // HTTP 413
  kPermissionDenied,   // missing privilege (BPF, shm), or a role that does not allow it (403)
  kUnauthenticated,    // no credentials, or credentials that are not valid (HTTP 401)
  kInternal,           // a bug or an unexpected system error (HTTP 500)
};

const char* StatusCodeName(StatusCode code);
// The HTTP status that a request failing with `code` should be answered with.
int HttpStatusFor(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
// Builds an error from errno-style codes: "<what>: <strerror(err)>".
Status ErrnoStatus(const std::string& what, int err);

// A value or the Status explaining why there is none (a small std::expected stand-in: GCC 12
// has no <expected>).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace shoal

#define SHOAL_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::shoal::Status shoal_st_ = (expr);    \
    if (!shoal_st_.ok()) return shoal_st_; \
  } while (0)
