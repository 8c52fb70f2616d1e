// Temporary directories for tests: the one way tests make them.
//   TempDir     made under /tmp as <prefix>-XXXXXX, removed with everything in it when it goes
//               out of scope
//   MakeTempDir the same directory, kept: for fixtures that remove it themselves or leave it
//               for a failed test's logs
#pragma once

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace shoal::testing {

// /tmp/<prefix>-XXXXXX, created with `mode` (mkdtemp makes it 0700). Aborts when /tmp refuses:
// no test can run without its directory.
inline std::string MakeTempDir(std::string_view prefix, mode_t mode = 0700) {
  std::string path = "/tmp/" + std::string(prefix) + "-XXXXXX";
  if (mkdtemp(path.data()) == nullptr) std::abort();
  if (mode != 0700) chmod(path.c_str(), mode);
  return path;
}

class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "shoal-test", mode_t mode = 0700)
      : path_(MakeTempDir(prefix, mode)) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace shoal::testing
