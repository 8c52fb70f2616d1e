#include "shoal/runtime/sandbox/handler_library.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace shoal {
namespace {

namespace fs = std::filesystem;

std::string SelfDir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/") : p.parent_path().string();
}

std::string Normal(const std::string& p) {
  std::string n = fs::path(p).lexically_normal().string();
  while (n.size() > 1 && n.back() == '/') n.pop_back();
  return n;
}

std::string Join(const std::vector<std::string>& dirs) {
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ", ") + d;
  return out.empty() ? "none configured" : out;
}

// Root owns it (or this process's user, for a shoald that is not root) and nobody else may
// write it.
std::string Unsafe(int fd, const std::string& what, bool want_dir) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return what + ": " + std::strerror(errno);
  if (want_dir && !S_ISDIR(st.st_mode)) return what + " is not a directory";
  if (!want_dir && !S_ISREG(st.st_mode)) return what + " is not a regular file";
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    return what + " is owned by uid " + std::to_string(st.st_uid) + ", not root";
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[16];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return what + " is writable by group or others (mode " + mode + ")";
  }
  return {};
}

}  // namespace

std::vector<std::string> ResolveHandlerDirs(const std::vector<std::string>& configured) {
  std::vector<std::string> out;
  for (const auto& d : configured) {
    std::string p = d;
    if (p.rfind("$ORIGIN", 0) == 0) p = SelfDir() + p.substr(7);
    if (p.empty() || p[0] != '/') continue;  // the config loader refuses relative entries
    out.push_back(Normal(p));
  }
  return out;
}

Result<UniqueFd> OpenHandlerLibrary(const std::string& path, const std::vector<std::string>& dirs) {
  if (path.empty() || path[0] != '/') return InvalidArgument("must be an absolute path");
  const std::string file = Normal(path);
  const std::string* base = nullptr;
  for (const auto& d : dirs) {
    if (file.size() > d.size() + 1 && file.compare(0, d.size(), d) == 0 &&
        (d == "/" || file[d.size()] == '/')) {
      base = &d;
      break;
    }
  }
  if (base == nullptr) {
    return PermissionDenied(path + " is outside the handler directories (allowed: " + Join(dirs) +
                            ")");
  }
  UniqueFd cur(open(base->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cur.valid()) return NotFound("handler directory " + *base + ": " + std::strerror(errno));
  if (std::string why = Unsafe(cur.get(), "handler directory " + *base, true); !why.empty()) {
    return PermissionDenied(why);
  }
  // Walk down one component at a time from the handler directory's descriptor.
  const std::string rest = file.substr(base->size() == 1 ? 1 : base->size() + 1);
  std::string walked = *base == "/" ? "" : *base;
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t slash = rest.find('/', pos);
    const bool last = slash == std::string::npos;
    if (last) slash = rest.size();
    const std::string comp = rest.substr(pos, slash - pos);
    walked += "/" + comp;
    if (comp.empty() || comp == "." || comp == "..") {
      return InvalidArgument(path + ": bad path component '" + comp + "'");
    }
    const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY);
    UniqueFd next(openat(cur.get(), comp.c_str(), flags));
    if (!next.valid()) {
      const int err = errno;
      if (err == ELOOP || (err == ENOTDIR && !last)) {
        struct stat st {};
        if (fstatat(cur.get(), comp.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(st.st_mode)) {
          return PermissionDenied(walked +
                                  " is a symbolic link (not followed below a handler "
                                  "directory)");
        }
      }
      if (err == ENOENT) return NotFound("no such file on this node: " + walked);
      return PermissionDenied(walked + ": " + std::strerror(err));
    }
    if (std::string why = Unsafe(next.get(), walked, !last); !why.empty()) {
      return PermissionDenied(why);
    }
    cur = std::move(next);
    if (last) break;
    pos = slash + 1;
  }
  // The loader maps it: clear O_NONBLOCK again (harmless on a regular file, but tidy).
  fcntl(cur.get(), F_SETFL, 0);
  return cur;
}

std::string CodeLoadingEnvReason(const std::string& name) {
  if (name.rfind("LD_", 0) == 0) return "the dynamic loader reads LD_* variables (preloads code)";
  // glibc's list of variables it drops for set-uid programs (unsecvars.h), and the language
  // runtimes' equivalents of LD_PRELOAD.
  static const char* const kNames[] = {"GCONV_PATH",
                                       "GETCONF_DIR",
                                       "GLIBC_TUNABLES",
                                       "HOSTALIASES",
                                       "LOCALDOMAIN",
                                       "LOCPATH",
                                       "MALLOC_TRACE",
                                       "NIS_PATH",
                                       "NLSPATH",
                                       "RESOLV_HOST_CONF",
                                       "RES_OPTIONS",
                                       "TZDIR",
                                       "PYTHONPATH",
                                       "PYTHONHOME",
                                       "PYTHONSTARTUP",
                                       "PERL5LIB",
                                       "PERL5OPT",
                                       "PERLLIB",
                                       "RUBYLIB",
                                       "RUBYOPT",
                                       "NODE_OPTIONS",
                                       "NODE_PATH",
                                       "JAVA_TOOL_OPTIONS",
                                       "_JAVA_OPTIONS",
                                       "CUDA_INJECTION64_PATH",
                                       "OPENSSL_CONF",
                                       "OPENSSL_ENGINES",
                                       "OPENSSL_MODULES"};
  for (const char* n : kNames) {
    if (name == n) return "glibc or a language runtime loads code or data files named by it";
  }
  return {};
}

}  // namespace shoal
