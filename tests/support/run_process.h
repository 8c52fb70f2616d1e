// A program run to its end for a test, as a user runs it: its stdin from a string, its stdout
// and stderr caught whole, its exit status (128 + the signal when one killed it).
#pragma once

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace shoal::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] a path) with `stdin_data` on its stdin; with `env`, in exactly that
// environment ("NAME=value" each), else in this process's.
inline CliResult RunProcess(std::vector<std::string> argv, const std::string& stdin_data,
                            const std::vector<std::string>* env = nullptr) {
  char out_t[] = "/tmp/shoal-test-out-XXXXXX", err_t[] = "/tmp/shoal-test-err-XXXXXX",
       in_t[] = "/tmp/shoal-test-in-XXXXXX";
  const int out = mkstemp(out_t), err = mkstemp(err_t), in = mkstemp(in_t);
  CliResult r;
  if (write(in, stdin_data.data(), stdin_data.size()) == static_cast<ssize_t>(stdin_data.size())) {
    lseek(in, 0, SEEK_SET);
    std::vector<std::string> env_s = env ? *env : std::vector<std::string>{};
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(in, 0);
      dup2(out, 1);
      dup2(err, 2);
      std::vector<char*> args, envp;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      for (auto& e : env_s) envp.push_back(e.data());
      envp.push_back(nullptr);
      if (env) {
        execve(args[0], args.data(), envp.data());
      } else {
        execv(args[0], args.data());
      }
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    for (auto [path, text] : {std::pair{out_t, &r.out}, std::pair{err_t, &r.err}}) {
      std::stringstream ss;
      ss << std::ifstream(path, std::ios::binary).rdbuf();
      *text = ss.str();
    }
  } else {
    r.err = "the test could not write the program's stdin";
  }
  for (int fd : {out, err, in}) close(fd);
  for (const char* p : {out_t, err_t, in_t}) unlink(p);
  return r;
}

}  // namespace shoal::testing
