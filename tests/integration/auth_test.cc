// The control plane's security through a real shoald: bearer tokens on every /v1 route of the
// control listener, the roles (admin, deployer per namespace, viewer, invoker, fl-client of one
// job), the control API absent from the public listener, `auth: token` functions, the token
// lifecycle through the CLI, and TLS on a control listener beyond loopback. Each refused
// request is checked to change nothing on the node (registry, pools, running instances).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "shoal/common/file_io.h"
#include "tests/support/shoald_fixture.h"

namespace shoal::testing {
namespace {

using Json = nlohmann::json;

bool IsFleet(const std::string& method, const std::string& path) {
  if (path.rfind("/v1/jobs/", 0) != 0) return false;
  const std::string rest = path.substr(9, path.find('?') - 9);
  const auto slash = rest.find('/');
  const std::string sub = slash == std::string::npos ? "" : rest.substr(slash + 1);
  return (sub.empty() && method == "GET") || (sub == "join" && method == "POST") ||
         (sub == "task" && method == "GET") || (sub == "model" && method == "GET") ||
         (sub == "eval" && method == "POST");
}

std::string Fn(const std::string& name, const std::string& ns, const std::string& extra = {}) {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: " + name +
         "\n  namespace: " + ns +
         "\nspec:\n  handler: {builtin: echo}\n  scale: {min: 1, max: 1}\n" + extra;
}

std::string Job(const std::string& name, const std::string& ns) {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\n  namespace: " + ns +
         "\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: logreg}\n"
         "  clients: {expected: 2}\n  stop: {rounds: 3}\n";
}

std::string ReadFile(const std::string& path) { return ReadFileBytes(path).value_or(""); }

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1))
    ++n;
  return n;
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(shoald_.Start()) << shoald_.Log(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- shoald log ----\n" << shoald_.Log();
  }

  // What a refused request must leave as it was: the functions and jobs with their
  // generations, the node's pools in /dev/shm, the running instances.
  std::string NodeState() {
    std::string out;
    auto fns = Json::parse(shoald_.Api("GET", "/v1/functions").body, nullptr, false);
    for (const auto& f : fns.value("functions", Json::array())) {
      out += f.value("name", "") + "@" + std::to_string(f.value("generation", 0)) + " pids:";
      for (int pid : shoald_.InstancePids(f.value("name", ""))) out += std::to_string(pid) + ",";
      out += "\n";
    }
    auto jobs = Json::parse(shoald_.Api("GET", "/v1/jobs").body, nullptr, false);
    for (const auto& j : jobs.value("jobs", Json::array())) {
      out += "job " + j.value("name", "") + " updates " +
             std::to_string(j.value("updates_total", -1)) + " clients " +
             j.value("clients", Json::object()).dump() + "\n";
    }
    std::set<std::string> shm;
    if (DIR* d = opendir("/dev/shm")) {
      while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n.find("shoal." + shoald_.node() + ".") == 0) shm.insert(n);
      }
      closedir(d);
    }
    for (const auto& n : shm) out += "shm " + n + "\n";
    auto toks = Json::parse(shoald_.Api("GET", "/v1/tokens").body, nullptr, false);
    out += "tokens " + std::to_string(toks.value("tokens", Json::array()).size()) + "\n";
    return out;
  }

  Shoald shoald_;
};

TEST_F(AuthTest, EveryControlRouteAnswers401WithoutAValidTokenAndChangesNothing) {
  ASSERT_EQ(shoald_.Deploy(Fn("echo", "default") + "---\n" + Job("jx", "default")).exit_code, 0);
  ASSERT_TRUE(shoald_.WaitReady("echo", 1));
  const std::string before = NodeState();
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"GET", "/v1/functions"},
      {"POST", "/v1/functions"},
      {"GET", "/v1/functions/echo"},
      {"DELETE", "/v1/functions/echo"},
      {"GET", "/v1/functions/echo/logs"},
      {"GET", "/v1/top"},
      {"GET", "/v1/node"},
      {"GET", "/v1/jobs"},
      {"POST", "/v1/jobs"},
      {"GET", "/v1/jobs/jx"},
      {"DELETE", "/v1/jobs/jx"},
      {"POST", "/v1/jobs/jx/join"},
      {"GET", "/v1/jobs/jx/task?client=c"},
      {"GET", "/v1/jobs/jx/model"},
      {"POST", "/v1/jobs/jx/eval"},
      {"GET", "/v1/tokens"},
      {"POST", "/v1/tokens"},
      {"DELETE", "/v1/tokens/abc"}};
  const std::string body = Fn("evil", "default");
  for (const auto& [method, path] : routes) {
    for (const std::string& token :
         {std::string("-"), std::string("shoal_000000000000_") + std::string(64, '0'),
          std::string("not-a-token")}) {
      auto r = shoald_.Api(method, path, method == "GET" ? "" : body, {}, token);
      EXPECT_EQ(r.status, 401) << method << " " << path << " token " << token << ": " << r.body;
      EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
      EXPECT_EQ(r.headers["www-authenticate"].rfind("Bearer realm=\"shoal\"", 0), 0u)
          << method << " " << path;
    }
  }
  // The public listener does not serve the control API at all, token or not.
  for (const auto& [method, path] : routes) {
    if (IsFleet(method, path)) continue;
    for (const std::string& auth : {std::string(), shoald_.AuthHeader()}) {
      std::vector<std::string> headers;
      if (!auth.empty()) headers.push_back(auth);
      auto r = Http(shoald_.port(), method, path, method == "GET" ? "" : body, headers);
      EXPECT_EQ(r.status, 404) << method << " " << path << ": " << r.body;
      EXPECT_NE(r.body.find("the control API is not served on this listener"), std::string::npos)
          << r.body;
    }
  }
  // The fleet routes it does serve need a token there too.
  for (const auto& [method, path] : routes) {
    if (!IsFleet(method, path)) continue;
    auto r = Http(shoald_.port(), method, path, method == "GET" ? "" : "{}");
    EXPECT_EQ(r.status, 401) << method << " " << path << ": " << r.body;
  }
  auto up = Http(shoald_.port(), "POST", "/v1/jobs/jx/updates", std::string(100, 'x'),
                 {"Content-Type: application/octet-stream"});
  EXPECT_EQ(up.status, 401) << up.body;
  EXPECT_EQ(NodeState(), before);
  // The issue's exploit: an unauthenticated deploy naming a library, on either listener.
  const std::string lib =
      Fn("x", "default")
          .replace(Fn("x", "default").find("{builtin: echo}"), 15, "{library: /tmp/evil.so}");
  EXPECT_EQ(Http(shoald_.port(), "POST", "/v1/functions", lib).status, 404);
  EXPECT_EQ(shoald_.Api("POST", "/v1/functions", lib, {}, "-").status, 401);
  EXPECT_EQ(NodeState(), before);
  EXPECT_GE(shoald_.Metric("shoal_gateway_rejections_total", "reason=\"unauthenticated\""), 4);
}

TEST_F(AuthTest, RolesAreEnforcedPerNamespaceAndRefusalsChangeNothing) {
  ASSERT_EQ(shoald_.Deploy(Fn("fa", "a") + "---\n" + Fn("fb", "b")).exit_code, 0);
  ASSERT_TRUE(shoald_.WaitReady("fa", 1));
  ASSERT_TRUE(shoald_.WaitReady("fb", 1));
  const std::string viewer = shoald_.CreateToken("viewer");
  const std::string dep_a = shoald_.CreateToken("deployer", "a");
  const std::string inv_a = shoald_.CreateToken("invoker", "a");
  const std::string client = shoald_.CreateToken("fl-client", "", "jx");
  ASSERT_FALSE(viewer.empty());
  ASSERT_FALSE(dep_a.empty());
  const std::string before = NodeState();

  struct Case {
    std::string token, method, path, body, expect_in_error;
  };
  const std::vector<Case> refused = {
      {viewer, "POST", "/v1/functions", Fn("fa", "a", "  concurrency: 3\n"),
       "may not deploy or delete"},
      {viewer, "DELETE", "/v1/functions/fa", "", "may not deploy or delete in namespace 'a'"},
      {viewer, "GET", "/v1/functions/fa/logs", "", "may not read logs"},
      {viewer, "POST", "/v1/tokens", "{\"role\":\"admin\"}", "may not manage tokens"},
      {viewer, "GET", "/v1/tokens", "", "may not manage tokens"},
      {dep_a, "POST", "/v1/functions", Fn("fb", "b", "  concurrency: 3\n"),
       "(deployer of namespace 'a') may not deploy or delete in namespace 'b'"},
      // All or nothing: one document of another namespace refuses the whole manifest.
      {dep_a, "POST", "/v1/functions",
       Fn("fa", "a", "  concurrency: 3\n") + "---\n" + Fn("fb", "b"),
       "may not deploy or delete in namespace 'b'"},
      // Moving b's function into a is a write in b.
      {dep_a, "POST", "/v1/functions", Fn("fb", "a"), "in namespace 'b'"},
      {dep_a, "DELETE", "/v1/functions/fb", "", "in namespace 'b'"},
      {dep_a, "GET", "/v1/functions/fb", "", "may not read in namespace 'b'"},
      {dep_a, "GET", "/v1/functions/fb/logs", "", "may not read logs in namespace 'b'"},
      {dep_a, "POST", "/v1/tokens", "{\"role\":\"deployer\",\"namespace\":\"b\"}", "manage tokens"},
      {inv_a, "GET", "/v1/functions", "", "(invoker of namespace 'a') may not read"},
      {inv_a, "POST", "/v1/functions", Fn("fa", "a", "  concurrency: 3\n"), "may not deploy"},
      {client, "GET", "/v1/functions", "", "(fl-client of FL job 'jx') may not read"},
      {client, "GET", "/v1/top", "", "may not read the node's load"},
      {client, "POST", "/v1/functions", Fn("fa", "a", "  concurrency: 3\n"), "may not deploy"},
  };
  for (const Case& c : refused) {
    auto r = shoald_.Api(c.method, c.path, c.body, {}, c.token);
    EXPECT_EQ(r.status, 403) << c.method << " " << c.path << ": " << r.body;
    EXPECT_NE(r.body.find(c.expect_in_error), std::string::npos)
        << c.method << " " << c.path << ": " << r.body;
  }
  EXPECT_EQ(NodeState(), before);
  // The CLI says the same and exits non-zero.
  auto cli = shoald_.Cli({"delete", "fb"}, {}, dep_a);
  EXPECT_NE(cli.exit_code, 0);
  EXPECT_NE(cli.err.find("may not deploy or delete in namespace 'b'"), std::string::npos)
      << cli.err;
  EXPECT_EQ(NodeState(), before);

  // What each role may do.
  EXPECT_EQ(shoald_.Api("GET", "/v1/functions/fb", "", {}, viewer).status, 200);
  EXPECT_EQ(shoald_.Api("GET", "/v1/top", "", {}, viewer).status, 200);
  auto listed = Json::parse(shoald_.Api("GET", "/v1/functions", "", {}, dep_a).body);
  ASSERT_EQ(listed["functions"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["functions"][0]["name"], "fa");
  EXPECT_EQ(
      Json::parse(shoald_.Api("GET", "/v1/functions", "", {}, viewer).body)["functions"].size(),
      2u);
  EXPECT_EQ(shoald_.Api("GET", "/v1/functions/fa/logs", "", {}, dep_a).status, 200);
  auto redeploy =
      shoald_.Api("POST", "/v1/functions", Fn("fa", "a", "  concurrency: 3\n"), {}, dep_a);
  EXPECT_EQ(redeploy.status, 200) << redeploy.body;
  EXPECT_EQ(Json::parse(shoald_.Api("GET", "/v1/functions/fa").body)["generation"], 2);
  EXPECT_EQ(shoald_.Api("DELETE", "/v1/functions/fa", "", {}, dep_a).status, 200);
  EXPECT_EQ(shoald_.Api("GET", "/v1/functions/fa").status, 404);
  EXPECT_EQ(shoald_.Api("GET", "/v1/functions/fb").status, 200);
}

TEST_F(AuthTest, FlClientTokensActOnTheirJobOnly) {
  ASSERT_EQ(shoald_.Deploy(Job("jx", "a") + "---\n" + Job("jy", "b")).exit_code, 0);
  const std::string cx = shoald_.CreateToken("fl-client", "", "jx");
  ASSERT_FALSE(cx.empty());
  const std::string before = NodeState();
  const std::string auth = shoald_.AuthHeader(cx);
  // Job Y is out of reach on both listeners.
  EXPECT_EQ(Http(shoald_.port(), "POST", "/v1/jobs/jy/join", "{}", {auth}).status, 403);
  EXPECT_EQ(Http(shoald_.port(), "GET", "/v1/jobs/jy", "", {auth}).status, 403);
  EXPECT_EQ(Http(shoald_.port(), "GET", "/v1/jobs/jy/model", "", {auth}).status, 403);
  EXPECT_EQ(Http(shoald_.port(), "GET", "/v1/jobs/jy/task?client=c1", "", {auth}).status, 403);
  auto up = Http(shoald_.port(), "POST", "/v1/jobs/jy/updates", std::string(200, 'u'),
                 {"Content-Type: application/octet-stream", auth});
  EXPECT_EQ(up.status, 403) << up.body;
  EXPECT_NE(up.body.find("(fl-client of FL job 'jx') may not act as an FL client on FL job 'jy'"),
            std::string::npos)
      << up.body;
  EXPECT_EQ(shoald_.Api("POST", "/v1/jobs/jy/join", "{}", {}, cx).status, 403);
  EXPECT_EQ(shoald_.Api("DELETE", "/v1/jobs/jx", "", {}, cx).status, 403);
  EXPECT_EQ(shoald_.Api("POST", "/v1/jobs", Job("jx", "a"), {}, cx).status, 403);
  EXPECT_EQ(NodeState(), before);
  // The update was refused by the gateway itself, before any pool memory was taken.
  EXPECT_GE(shoald_.Metric("shoal_gateway_rejections_total", "reason=\"forbidden\""), 1);

  // Its own job: status, join, model, and an update that passes the token check and is then
  // judged on its bytes (this one is garbage: 400, not counted).
  EXPECT_EQ(Http(shoald_.port(), "GET", "/v1/jobs/jx", "", {auth}).status, 200);
  auto join = Http(shoald_.port(), "POST", "/v1/jobs/jx/join", "{\"name\":\"c1\"}",
                   {auth, "Content-Type: application/json"});
  EXPECT_EQ(join.status, 200) << join.body;
  EXPECT_EQ(Http(shoald_.port(), "GET", "/v1/jobs/jx/model?version=0", "", {auth}).status, 200);
  auto garbage = Http(shoald_.port(), "POST", "/v1/jobs/jx/updates", std::string(200, 'u'),
                      {"Content-Type: application/octet-stream", auth});
  EXPECT_EQ(garbage.status, 400) << garbage.body;
  auto st = Json::parse(shoald_.Api("GET", "/v1/jobs/jx").body);
  EXPECT_EQ(st.value("updates_total", -1), 0);
  EXPECT_EQ(st["clients"]["joined"], 1);
}

TEST_F(AuthTest, TokensAreCreatedListedAndRevokedThroughTheCliAndStoredHashed) {
  // The first admin token: printed once, in a 0600 file, hashed in the store.
  const std::string admin = shoald_.admin_token();
  ASSERT_EQ(admin.size(), 6u + 12 + 1 + 64) << admin;
  struct stat st {};
  ASSERT_EQ(stat(shoald_.admin_conf().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string store_path = shoald_.state_dir() + "/state/tokens.json";
  ASSERT_EQ(stat(store_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadFile(store_path).find(admin.substr(19)), std::string::npos)
      << "the secret is in the store";
  EXPECT_EQ(Count(shoald_.Log(), admin), 1u);

  auto created = shoald_.Cli({"token", "create", "--role", "viewer", "--name", "dash"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  std::string viewer = created.out;
  while (!viewer.empty() && viewer.back() == '\n') viewer.pop_back();
  ASSERT_EQ(viewer.rfind("shoal_", 0), 0u) << created.out;
  EXPECT_NE(created.err.find("shown once"), std::string::npos);
  EXPECT_EQ(ReadFile(store_path).find(viewer.substr(19)), std::string::npos);
  const std::string id = viewer.substr(6, 12);

  auto list = shoald_.Cli({"token", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find(id), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("dash"), std::string::npos);
  EXPECT_NE(list.out.find("viewer"), std::string::npos);
  EXPECT_EQ(list.out.find(viewer.substr(19)), std::string::npos) << "list shows a secret";

  EXPECT_EQ(shoald_.Cli({"get"}, {}, viewer).exit_code, 0);
  // `shoal get nodes` on a standalone shoald lists the one node it is (a viewer may read it).
  auto nodes = shoald_.Cli({"get", "nodes"}, {}, viewer);
  EXPECT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_NE(nodes.out.find("Ready,standalone"), std::string::npos) << nodes.out;
  auto bad_role = shoald_.Cli({"token", "create", "--role", "deployer"});
  EXPECT_NE(bad_role.exit_code, 0);
  EXPECT_NE(bad_role.err.find("namespace: role deployer needs a namespace"), std::string::npos)
      << bad_role.err;

  auto revoke = shoald_.Cli({"token", "revoke", id});
  ASSERT_EQ(revoke.exit_code, 0) << revoke.err;
  auto after = shoald_.Cli({"get"}, {}, viewer);
  EXPECT_NE(after.exit_code, 0);
  EXPECT_NE(after.err.find("the bearer token is not valid"), std::string::npos) << after.err;
  EXPECT_NE(after.err.find("SHOAL_TOKEN"), std::string::npos) << after.err;

  // Tokens survive a restart (hashed); the admin token is not printed again.
  const std::string dep = shoald_.CreateToken("deployer", "a");
  shoald_.Stop();
  ASSERT_TRUE(shoald_.Start()) << shoald_.Log();
  EXPECT_EQ(shoald_.admin_token(), admin);
  EXPECT_EQ(shoald_.Api("GET", "/v1/functions", "", {}, dep).status, 200);
  EXPECT_EQ(shoald_.Api("GET", "/v1/functions", "", {}, viewer).status, 401);
  EXPECT_EQ(Count(shoald_.Log(), admin), 1u);
  // A config file that holds a token must be private.
  const std::string loose = shoald_.state_dir() + "/loose.conf";
  {
    std::ofstream f(loose);
    f << "server: http://127.0.0.1:" << shoald_.control_port() << "\ntoken: " << admin << "\n";
  }
  chmod(loose.c_str(), 0644);
  auto refused = RunCli({"get"}, {}, {"SHOAL_CONFIG=" + loose});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("readable by others (mode 0644): chmod 600"), std::string::npos)
      << refused.err;
}

TEST_F(AuthTest, AFunctionWithAuthTokenAnswersOnlyTokensThatMayInvokeIt) {
  ASSERT_EQ(
      shoald_.Deploy(Fn("private", "a", "  auth: token\n") + "---\n" + Fn("open", "a")).exit_code,
      0);
  ASSERT_TRUE(shoald_.WaitReady("private", 1));
  ASSERT_TRUE(shoald_.WaitReady("open", 1));
  const std::string inv_a = shoald_.CreateToken("invoker", "a");
  const std::string inv_b = shoald_.CreateToken("invoker", "b");
  const std::string viewer = shoald_.CreateToken("viewer");
  auto none = Http(shoald_.port(), "POST", "/fn/private", "hello");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.headers["www-authenticate"], "Bearer realm=\"shoal\"");
  EXPECT_EQ(
      Http(shoald_.port(), "POST", "/fn/private", "hello", {shoald_.AuthHeader(inv_b)}).status,
      403);
  EXPECT_EQ(
      Http(shoald_.port(), "POST", "/fn/private", "hello", {shoald_.AuthHeader(viewer)}).status,
      403);
  auto ok = Http(shoald_.port(), "POST", "/fn/private", "hello", {shoald_.AuthHeader(inv_a)});
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "hello");
  auto open = Http(shoald_.port(), "POST", "/fn/open", "hi");
  EXPECT_EQ(open.status, 200);
  EXPECT_EQ(open.body, "hi");
  // The CLI's invoke sends its token to the gateway.
  auto cli = shoald_.Cli({"invoke", "private", "-d", "via cli"}, {}, inv_a);
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(cli.out, "via cli");
  auto j = Json::parse(shoald_.Api("GET", "/v1/functions/private").body);
  EXPECT_EQ(j["auth"], "token");
  EXPECT_EQ(j["status"]["requests_total"], 2);  // the refused ones never reached it
  auto bad = shoald_.Deploy(Fn("x", "a", "  auth: password\n"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("spec.auth: must be token or none, got \"password\""), std::string::npos)
      << bad.err;
}

TEST(AuthListener, BeyondLoopbackTheControlApiNeedsTls) {
  Shoald plain;
  Shoald::Options o;
  o.extra_yaml = "control_listen_host: 0.0.0.0\n";
  EXPECT_FALSE(plain.Start(o));
  EXPECT_NE(plain.Log().find("control_listen_host '0.0.0.0' is beyond this host: set "
                             "control_tls_cert and control_tls_key"),
            std::string::npos)
      << plain.Log();

  Shoald tls;
  const std::string dir = tls.state_dir();
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir +
                          "/key.pem -out " + dir +
                          "/cert.pem -days 1 -subj /CN=shoal-test -addext "
                          "subjectAltName=IP:127.0.0.1 >/dev/null 2>&1";
  if (system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl cannot make a test certificate";
  o.extra_yaml = "control_listen_host: 0.0.0.0\ncontrol_tls_cert: " + dir +
                 "/cert.pem\ncontrol_tls_key: " + dir + "/key.pem\n";
  ASSERT_TRUE(tls.Start(o)) << tls.Log();
  EXPECT_NE(tls.Log().find("control API on https://127.0.0.1:"), std::string::npos) << tls.Log();
  // Plain HTTP to the TLS listener gets no answer.
  EXPECT_NE(Http(tls.control_port(), "GET", "/v1/node", "", {tls.AuthHeader()}, 0, 3000).status,
            200);
  // The CLI with the certificate as its CA, through admin.conf plus `ca:`.
  const std::string conf = dir + "/tls.conf";
  {
    std::ofstream f(conf);
    f << ReadFile(tls.admin_conf()) << "ca: " << dir << "/cert.pem\n";
  }
  chmod(conf.c_str(), 0600);
  auto get = RunCli({"get", "-o", "json"}, {}, {"SHOAL_CONFIG=" + conf});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_NE(get.out.find("\"functions\""), std::string::npos) << get.out;
  // Without trusting it, the CLI refuses the connection.
  auto untrusted = tls.Cli({"get"});
  EXPECT_EQ(untrusted.exit_code, 2) << untrusted.err;
  EXPECT_NE(untrusted.err.find("cannot reach shoald"), std::string::npos) << untrusted.err;
}

}  // namespace
}  // namespace shoal::testing
