#include "shoal/common/status.h"

#include <cerrno>
#include <cstring>

#include "shoal/common/http_status.h"

namespace shoal {

namespace {

// Each code's name and the HTTP status a request failing with it is answered with, once.
struct CodeInfo {
  StatusCode code;
  const char* name;
  int http;
};
constexpr CodeInfo kCodes[] = {
    {StatusCode::kOk, "OK", 200},
    {StatusCode::kInvalidArgument, "INVALID_ARGUMENT", 400},
    {StatusCode::kNotFound, "NOT_FOUND", 404},
    {StatusCode::kAlreadyExists, "ALREADY_EXISTS", 409},
    {StatusCode::kResourceExhausted, "RESOURCE_EXHAUSTED", 503},
    {StatusCode::kUnavailable, "UNAVAILABLE", 502},
    {StatusCode::kDeadlineExceeded, "DEADLINE_EXCEEDED", 504},
    {StatusCode::kTooLarge, "TOO_LARGE", 413},
    {StatusCode::kPermissionDenied, "PERMISSION_DENIED", 403},
    {StatusCode::kUnauthenticated, "UNAUTHENTICATED", 401},
    {StatusCode::kInternal, "INTERNAL", 500},
};

const CodeInfo* InfoOf(StatusCode code) {
  for (const CodeInfo& c : kCodes) {
    if (c.code == code) return &c;
  }
  return nullptr;
}

}  // namespace

const char* StatusCodeName(StatusCode code) {
  const CodeInfo* c = InfoOf(code);
  return c != nullptr ? c->name : "UNKNOWN";
}

int HttpStatusFor(StatusCode code) {
  const CodeInfo* c = InfoOf(code);
  return c != nullptr ? c->http : 500;
}

std::optional<StatusCode> StatusCodeForHttp(int http) {
  for (const CodeInfo& c : kCodes) {
    if (c.http == http) return c.code;
  }
  return std::nullopt;
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
