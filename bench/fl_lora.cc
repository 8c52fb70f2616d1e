// bench-fl-lora: federated LoRA fine-tuning of the shoal-gpt base model (issue 36) through a
// real shoald: FedIT against HetLoRA (heterogeneous ranks) against full fine-tuning (an FLJob
// over all the weights, the anchor, measured in the same run), with the base model and a
// centrally trained adapter as references: rounds to a perplexity target and bytes per round.
// The clients are PyTorch (tools/lm/fl_lora.py); the driver is bench/fl_lora.py, run under the
// project's venv with the base model scripts/lm-path names.
//
// RESULT fl_lora ratio = bytes pushed to reach the target, full fine-tuning's / FedIT's.
//
//   build/bin/bench-fl-lora [--rounds N] [--local-steps S] [--rank R] [--methods fedit,...]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "project_python.h"

int main(int argc, char** argv) {
  const std::string root = SHOAL_SOURCE_DIR;
  const std::string python = shoal::bench::ProjectPython();
  std::string base;
  {
    FILE* p = popen((root + "/scripts/lm-path").c_str(), "r");
    char buf[4096] = {};
    if (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) base = buf;
    if (p != nullptr) pclose(p);
    while (!base.empty() && (base.back() == '\n' || base.back() == ' ')) base.pop_back();
  }
  if (base.empty()) {
    std::fprintf(stderr,
                 "bench-fl-lora: no shoal-gpt base model (scripts/lm-path): run the set-up "
                 "(scripts/demo or scripts/test), or: source scripts/lib.sh && lm_base_model\n");
    return 2;
  }
  const std::filesystem::path bin = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  setenv("SHOAL_BIN_DIR", bin.c_str(), 0);
  setenv("PYTHONDONTWRITEBYTECODE", "1", 0);
  std::vector<std::string> args = {python, root + "/bench/fl_lora.py", "--base", base};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  if (chdir(root.c_str()) != 0) return 2;
  execv(python.c_str(), cargs.data());
  std::perror("bench-fl-lora: exec");
  return 2;
}
