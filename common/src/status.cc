#include "shoal/common/status.h"

#include <cerrno>
#include <cstring>

namespace shoal {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kTooLarge: return "TOO_LARGE";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists: return 409;
    case StatusCode::kResourceExhausted: return 503;
    case StatusCode::kUnavailable: return 502;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kTooLarge: return 413;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status ErrnoStatus(const std::string& what, int err) {
  StatusCode code = StatusCode::kInternal;
  if (err == EPERM || err == EACCES) code = StatusCode::kPermissionDenied;
  if (err == ENOENT) code = StatusCode::kNotFound;
  if (err == ENOMEM || err == ENOSPC) code = StatusCode::kResourceExhausted;
  if (err == EEXIST) code = StatusCode::kAlreadyExists;
  if (err == ECONNREFUSED || err == EPIPE || err == ECONNRESET) code = StatusCode::kUnavailable;
  return {code, what + ": " + std::strerror(err)};
}

}  // namespace shoal
