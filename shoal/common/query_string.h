// Reading a request's query string (`a=1&key=value&flag`): the one parser of the control API,
// the event stream's tickets and the OIP routes. Keys match exactly; the first occurrence wins.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shoal {

// The raw (undecoded) value of `key` ("" for a bare `key` or `key=`); nullopt when absent.
std::optional<std::string_view> RawQueryValue(std::string_view query, std::string_view key);

// The value of `key`, %XX-decoded ('+' stays '+': tokens may hold it); nullopt when absent.
std::optional<std::string> QueryValue(std::string_view query, std::string_view key);

// `key` as an unsigned decimal integer into `*out` (left as it is when absent); false when it is
// present but not one (empty, a sign, a fraction, trailing bytes, out of range).
bool QueryUint(std::string_view query, std::string_view key, uint64_t* out);

}  // namespace shoal
