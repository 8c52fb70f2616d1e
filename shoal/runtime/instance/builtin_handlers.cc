// Built-in handlers for demos and tests: echo (zero copy), sha256 and wordcount (real work
// on the body) and sleep (a slow handler for timeout and scaling tests); fl-leaf and
// inference come from their modules (builtin_module.h).
#include <dlfcn.h>
#include <openssl/evp.h>

#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "shoal/runtime/instance/builtin_module.h"
#include "shoal/runtime/instance/handler.h"

namespace shoal {
namespace {

class EchoHandler final : public Handler {
 public:
  bool MayBlock() const override { return false; }
  Status Handle(const Request&, ResponseBuilder& response) override {
    response.EchoRequest();
    return {};
  }
};

class Sha256Handler final : public Handler {
 public:
  bool MayBlock() const override { return false; }
  Status Handle(const Request& request, ResponseBuilder& response) override {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(request.body.data(), request.body.size(), digest, &len, EVP_sha256(), nullptr) !=
        1) {
      return Internal("sha256 failed");
    }
    auto out = response.Allocate(2 * len + 1, "text/plain");
    if (!out.ok()) return out.status();
    static constexpr char kHex[] = "0123456789abcdef";
    char* p = reinterpret_cast<char*>(out->data());
    for (unsigned i = 0; i < len; ++i) {
      *p++ = kHex[digest[i] >> 4];
      *p++ = kHex[digest[i] & 15];
    }
    *p = '\n';
    return {};
  }
};

class WordCountHandler final : public Handler {
 public:
  bool MayBlock() const override { return false; }
  Status Handle(const Request& request, ResponseBuilder& response) override {
    uint64_t words = 0, lines = 0;
    bool in_word = false;
    for (std::byte b : request.body) {
      const auto c = static_cast<unsigned char>(b);
      const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
      if (c == '\n') ++lines;
      if (!space && !in_word) ++words;
      in_word = !space;
    }
    std::string json = "{\"bytes\":" + std::to_string(request.body.size()) +
                       ",\"words\":" + std::to_string(words) +
                       ",\"lines\":" + std::to_string(lines) + "}\n";
    auto out = response.Allocate(json.size(), "application/json");
    if (!out.ok()) return out.status();
    std::memcpy(out->data(), json.data(), json.size());
    return {};
  }
};

// Sleeps for ms=<n> from the query (or the body as a number), then answers "slept <n> ms".
class SleepHandler final : public Handler {
 public:
  Status Handle(const Request& request, ResponseBuilder& response) override {
    std::string_view src =
        request.body.empty() ? std::string_view{}
                             : std::string_view(reinterpret_cast<const char*>(request.body.data()),
                                                request.body.size());
    if (auto pos = request.query.find("ms="); pos != std::string_view::npos) {
      src = request.query.substr(pos + 3);
    }
    uint64_t ms = 0;
    auto [ptr, ec] = std::from_chars(src.data(), src.data() + src.size(), ms);
    if (ec != std::errc() || ms > 600000) {
      return InvalidArgument("sleep: give the duration as ?ms=<0..600000> or a number body");
    }
    (void)ptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    std::string text = "slept " + std::to_string(ms) + " ms\n";
    auto out = response.Allocate(text.size(), "text/plain");
    if (!out.ok()) return out.status();
    std::memcpy(out->data(), text.data(), text.size());
    return {};
  }
};

}  // namespace

std::string BuiltinModuleDir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path dir = ec ? std::filesystem::path(".") : exe.parent_path();
  return (dir / ".." / "lib" / "shoal" / "modules").lexically_normal().string();
}

Result<std::unique_ptr<Handler>> LoadBuiltinModule(std::string_view name) {
  const std::string path = BuiltinModuleDir() + "/libshoal-builtin-" + std::string(name) + ".so";
  // Never closed: the handler's code must outlive every call into it.
  void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    return Unavailable("built-in handler '" + std::string(name) + "': cannot load " + path + ": " +
                       dlerror());
  }
  auto entry = reinterpret_cast<BuiltinModuleEntry>(dlsym(module, kBuiltinModuleEntry));
  if (entry == nullptr) {
    return Unavailable("built-in handler '" + std::string(name) + "': " + path + " has no " +
                       kBuiltinModuleEntry);
  }
  Status status;
  std::unique_ptr<Handler> handler;
  entry(&status, &handler);
  if (!status.ok()) return status;
  if (handler == nullptr) {
    return Internal("built-in handler '" + std::string(name) + "': " + path +
                    " returned no handler");
  }
  return handler;
}

Result<std::unique_ptr<Handler>> CreateBuiltinHandler(std::string_view name) {
  if (name == "fl-leaf" || name == "inference") return LoadBuiltinModule(name);
  if (name == "echo") return std::unique_ptr<Handler>(new EchoHandler);
  if (name == "sha256") return std::unique_ptr<Handler>(new Sha256Handler);
  if (name == "wordcount") return std::unique_ptr<Handler>(new WordCountHandler);
  if (name == "sleep") return std::unique_ptr<Handler>(new SleepHandler);
  return NotFound("no built-in handler named '" + std::string(name) + "'");
}

}  // namespace shoal
