// Assertions on text a test got back (a CLI's output, a log, a response body): the failure
// shows the whole text.
#pragma once

#include <gtest/gtest.h>

#include <string_view>

namespace shoal::testing {

// `text` contains `part`.
inline ::testing::AssertionResult Contains(std::string_view text, std::string_view part) {
  if (text.find(part) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no \"" << part << "\" in:\n" << text;
}

}  // namespace shoal::testing
