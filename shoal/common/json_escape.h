// A message as the inside of a JSON string, for the error bodies written by hand
// ({"error": "..."}) where the message may quote a client's bytes: '"' and '\' escaped, control
// characters as spaces, and every byte that is not part of valid UTF-8 as U+FFFD, so the body
// is always valid JSON (RFC 8259 requires UTF-8).
#pragma once

#include <string>
#include <string_view>

namespace shoal {

void AppendJsonEscaped(std::string& out, std::string_view s);

}  // namespace shoal
