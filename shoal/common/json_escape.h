// A message as the inside of a JSON string, for the JSON written by hand ({"error": "..."}
// bodies, OIP responses) where the text may quote a client's bytes: '"' and '\' escaped, control
// characters as spaces (kSpace, for messages) or \u00XX escapes (kEscape, for values that must
// round-trip, such as an OIP request's id), and every byte that is not part of valid UTF-8 as
// U+FFFD, so the output is always valid JSON (RFC 8259 requires UTF-8). Shoal's one escaper.
#pragma once

#include <string>
#include <string_view>

namespace shoal {

enum class JsonControl { kSpace, kEscape };

void AppendJsonEscaped(std::string& out, std::string_view s,
                       JsonControl control = JsonControl::kSpace);

}  // namespace shoal
