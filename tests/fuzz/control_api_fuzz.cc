// Fuzz target for the control API (shoal/control/node/control_api.h): every
// /v1 request a client sends reaches ControlApi::Handle with its method, path, query and body.
// An input is up to 8 requests separated by a line "%%"; each is a line "METHOD PATH[?QUERY]"
// followed by the body, optionally preceded by a line "Bearer <token>". The token is checked
// by a real TokenStore as the control listener does: the names admin, viewer, deployer-a,
// invoker-a and client-x stand for real tokens of those roles, anything else is sent as it is
// (and must be refused: such a request never reaches the API); no line means no token (the
// listener's 401). They run against a fresh registry and token store in a temp dir and a
// trivial RuntimeView. Every reply must carry an HTTP status, every error must be a JSON
// {"error": "..."} with a 4xx status (a 5xx is the server's own failure, never the client's),
// every JSON reply must parse, a 401/403 must leave the registry and the token list as they
// were, and at the end the registry must read back from disk as it is in memory.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "shoal/control/node/control_api.h"
#include "shoal/control/node/registry.h"
#include "shoal/security/auth/token_store.h"

namespace {

class TrivialRuntime : public shoal::RuntimeView {
 public:
  void FunctionsChanged() override {}
  shoal::FunctionStats Stats(const std::string&) override { return {}; }
  shoal::LogChunk Logs(const std::string& function, uint64_t offset, uint64_t max) override {
    const std::string all = "[" + function + "] a line\n";
    shoal::LogChunk c;
    if (offset < all.size()) c.text = all.substr(offset, max);
    c.next_offset = offset + c.text.size();
    return c;
  }
  std::string DataPlaneMode() override { return "unix"; }
};

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = cp << 6 | (d & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// A temp dir for the registry, removed at exit.
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/shoal-fuzz-api-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) abort();
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

std::string Names(const shoal::FunctionRegistry& r) {
  std::string out;
  for (const auto& s : r.List()) out += s.name + "/" + std::to_string(s.id) + " ";
  return out;
}

[[noreturn]] void Fail(const char* what, std::string_view method, std::string_view path,
                       const shoal::HttpReply& reply) {
  fprintf(stderr, "control_api_fuzz: %s: %.*s %.*s -> %d %s\n", what,
          static_cast<int>(method.size()), method.data(), static_cast<int>(path.size()),
          path.data(), reply.status, reply.body.substr(0, 300).c_str());
  abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal;
  using nlohmann::json;
  static const TempDir kRoot;
  std::error_code ec;
  std::filesystem::remove_all(kRoot.path + "/state", ec);
  NodeConfig config;
  config.state_dir = kRoot.path + "/state";
  auto opened = FunctionRegistry::Open(config);
  if (!opened.ok()) abort();
  FunctionRegistry& registry = **opened;
  auto store = auth::TokenStore::Open(kRoot.path + "/state/tokens.json");
  if (!store.ok()) abort();
  auth::TokenStore& tokens = **store;
  std::map<std::string, std::string> named;  // name in the input -> real token
  for (const auth::TokenRequest& r :
       {auth::TokenRequest{"admin", auth::Role::kAdmin, "", ""},
        auth::TokenRequest{"viewer", auth::Role::kViewer, "", ""},
        auth::TokenRequest{"deployer-a", auth::Role::kDeployer, "a", ""},
        auth::TokenRequest{"invoker-a", auth::Role::kInvoker, "a", ""},
        auth::TokenRequest{"client-x", auth::Role::kFlClient, "", "x"}}) {
    auto t = tokens.Create(r, /*ephemeral=*/true);  // memory only: no fsync per input
    if (!t.ok()) abort();
    named[r.name] = t->token;
  }
  TrivialRuntime runtime;
  ControlApi api(registry, runtime, nullptr, &tokens);

  std::string_view input(reinterpret_cast<const char*>(data), size);
  bool all_utf8 = true;
  for (int i = 0; i < 8 && !input.empty(); ++i) {
    const size_t sep = input.find("\n%%\n");
    std::string_view request = input.substr(0, sep);
    input = sep == std::string_view::npos ? std::string_view{} : input.substr(sep + 4);
    // An optional first line "Bearer <token>", as the listener would read it.
    std::optional<auth::Principal> who;
    bool had_token = false;
    if (request.starts_with("Bearer ")) {
      had_token = true;
      const size_t end = request.find('\n');
      const std::string name(request.substr(7, end == std::string_view::npos ? end : end - 7));
      request = end == std::string_view::npos ? std::string_view{} : request.substr(end + 1);
      const auto it = named.find(name);
      const std::string token = it != named.end() ? it->second : name;
      auto p = tokens.Authenticate(auth::BearerToken("Bearer " + token));
      if (p.ok() != (it != named.end())) {
        fprintf(stderr, "control_api_fuzz: token '%s' %s\n", token.c_str(),
                p.ok() ? "authenticated but was never issued" : "was issued but refused");
        abort();
      }
      if (!p.ok() && p.status().code() != StatusCode::kUnauthenticated) abort();
      if (p.ok()) who = *p;
    }
    // Without a token (or with a bad one) the listener answers 401: the API never sees it.
    if (!who) {
      (void)had_token;
      continue;
    }
    const size_t eol = request.find('\n');
    const std::string_view line = request.substr(0, eol);
    const std::string_view body =
        eol == std::string_view::npos ? std::string_view{} : request.substr(eol + 1);
    const size_t space = line.find(' ');
    const std::string_view method = line.substr(0, space);
    const std::string_view target =
        space == std::string_view::npos ? std::string_view{} : line.substr(space + 1);
    const size_t q = target.find('?');
    const std::string_view path = target.substr(0, q);
    const std::string_view query =
        q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);

    all_utf8 = all_utf8 && IsUtf8(body);
    const std::string before = Names(registry);
    const size_t tokens_before = tokens.List().size();
    const HttpReply reply = api.Handle(method, path, query, body, *who);
    if ((reply.status == 401 || reply.status == 403) &&
        (Names(registry) != before || tokens.List().size() != tokens_before)) {
      Fail("a refused request changed the node", method, path, reply);
    }
    if (who->role == auth::Role::kViewer && Names(registry) != before) {
      Fail("a viewer changed the registry", method, path, reply);
    }
    if (reply.status < 200 || reply.status >= 600) Fail("status out of range", method, path, reply);
    if (reply.status >= 500) Fail("server error for a client's request", method, path, reply);
    if (reply.content_type == "application/json") {
      const json j = json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) Fail("reply is not JSON", method, path, reply);
      if (reply.status >= 400 &&
          !(j.is_object() && j.contains("error") && j["error"].is_string())) {
        Fail("error reply without {\"error\": ...}", method, path, reply);
      }
    } else if (reply.status >= 400) {
      Fail("error reply is not JSON", method, path, reply);
    }
  }

  // Manifests that are not UTF-8 are refused at deploy (their records could not be read back),
  // so whatever was deployed must reopen.
  (void)all_utf8;
  auto reread = FunctionRegistry::Open(config);
  if (!reread.ok()) {
    fprintf(stderr, "control_api_fuzz: the registry does not open again: %s\n",
            reread.status().ToString().c_str());
    abort();
  }
  if (Names(**reread) != Names(registry)) {
    fprintf(stderr, "control_api_fuzz: registry on disk differs from memory\n");
    abort();
  }
  return 0;
}
