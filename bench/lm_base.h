// The language model the lm benches serve: --base when given, else the trained one
// (scripts/lm-path) when set-up built it, else a random one of the given sizes written by
// tools/lm/model.py --random. Copied under `out_dir`, readable by the instance's sandbox.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "project_python.h"

namespace shoal::bench {

struct LmSizes {
  int d_model = 192, n_layer = 4, n_head = 6, n_ctx = 128;  // the trained model's
};

inline std::string RunCommand(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// Sets *base (unless given) and *what; false (said on stderr) when no model could be made.
inline bool PrepareLmBase(const std::string& out_dir, const LmSizes& sizes, std::string* base,
                          std::string* what) {
  const std::string source = SHOAL_SOURCE_DIR;
  *what = "--base";
  if (base->empty() && access((source + "/scripts/lm-path").c_str(), X_OK) == 0) {
    const std::string trained = RunCommand(source + "/scripts/lm-path 2>/dev/null");
    if (!trained.empty() && access(trained.c_str(), R_OK) == 0) {
      // A copy beside the build: the instance's sandbox reads it there (the cache is private).
      *base = out_dir + "/trained.safetensors";
      std::filesystem::copy_file(trained, *base, std::filesystem::copy_options::overwrite_existing);
      *what = "the trained model (scripts/lm-path)";
    }
  }
  if (base->empty()) {
    *base = out_dir + "/random.safetensors";
    const std::string cmd = "cd " + source + " && " + ProjectPython() +
                            " -m tools.lm.model --random --seed 1 --std 0.02 --d-model " +
                            std::to_string(sizes.d_model) + " --n-layer " +
                            std::to_string(sizes.n_layer) + " --n-head " +
                            std::to_string(sizes.n_head) + " --n-ctx " +
                            std::to_string(sizes.n_ctx) + " --out " + *base;
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "bench: %s failed\n", cmd.c_str());
      return false;
    }
    *what = "a random model (tools/lm/model.py --random)";
  }
  chmod(base->c_str(), 0644);
  return true;
}

}  // namespace shoal::bench
