// The header fields of an HTTP/1.1 head, for the tests' own HTTP client and fake servers.
#pragma once

#include <cctype>
#include <istream>
#include <map>
#include <string>

namespace shoal::testing {

// The fields of the head lines left in `head` (after its first line): names lower-cased,
// values without their leading spaces, a line's "\r" dropped; a line without ':' is skipped.
inline std::map<std::string, std::string> HeadFields(std::istream& head) {
  std::map<std::string, std::string> fields;
  for (std::string line; std::getline(head, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    fields[name] = value;
  }
  return fields;
}

}  // namespace shoal::testing
