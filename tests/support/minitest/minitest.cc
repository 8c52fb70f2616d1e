// minitest's runner: runs every registered test in registration order and prints GoogleTest's
// markers ("[ RUN      ]", "[       OK ]", "[  SKIPPED ]", "[  FAILED  ]").
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace minitest {
namespace {

struct Entry {
  std::string name;
  void (*fn)();
};
std::vector<Entry>& Registry() {
  static std::vector<Entry> r;
  return r;
}
bool g_failed = false;
bool g_skipped = false;

}  // namespace

void RegisterTest(const char* suite, const char* name, void (*fn)()) {
  Registry().push_back({std::string(suite) + "." + name, fn});
}

void ReportFailure(const char* file, int line, const std::string& what, const std::string& msg) {
  g_failed = true;
  std::printf("%s:%d: Failure\n  %s\n  %s\n", file, line, what.c_str(), msg.c_str());
}

void ReportSkip(const std::string& msg) {
  g_skipped = true;
  std::printf("  skipped: %s\n", msg.c_str());
}

}  // namespace minitest

int main() {
  using namespace minitest;
  int passed = 0, failed = 0, skipped = 0;
  for (const Entry& e : Registry()) {
    g_failed = g_skipped = false;
    std::printf("[ RUN      ] %s\n", e.name.c_str());
    e.fn();
    if (g_failed) {
      ++failed;
      std::printf("[  FAILED  ] %s\n", e.name.c_str());
    } else if (g_skipped) {
      ++skipped;
      std::printf("[  SKIPPED ] %s\n", e.name.c_str());
    } else {
      ++passed;
      std::printf("[       OK ] %s\n", e.name.c_str());
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d skipped, %d failed\n", passed, skipped, failed);
  if (failed > 0) return 1;
  return skipped > 0 ? 77 : 0;
}
