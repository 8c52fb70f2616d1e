// The manifest tests' way to check a refusal: the message a parse was refused with (the code
// is kInvalidArgument), and tables of manifests each refused with its exact message.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "shoal/common/status.h"

namespace shoal {

// The message `r` (the parse of `yaml`) was refused with; "" (and a failure) if it parsed.
template <typename T>
std::string RefusalOf(const Result<T>& r, const std::string& yaml) {
  EXPECT_FALSE(r.ok()) << "parsed:\n" << yaml;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

// Each {manifest, message}: `error_of(manifest)` is exactly the message.
inline void ExpectErrors(std::string (*error_of)(const std::string&),
                         std::initializer_list<std::pair<std::string, std::string>> cases) {
  for (const auto& [yaml, message] : cases) EXPECT_EQ(error_of(yaml), message) << yaml;
}

}  // namespace shoal
