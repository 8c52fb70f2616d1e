// The operator's list/watch protocol against a loopback stand-in for the API server (cpp-httplib):
// a watch answered with 410 Gone (an ERROR event, as the API server sends for a
// resourceVersion it no longer has) makes it list again, a watch's ADDED event is deployed and
// its DELETED event deletes, each new generation is deployed once, and statuses are written
// through the status subresource as merge patches. tests/k8s's k8s_operator runs it against a
// real API server; a real one does not answer 410 on demand.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include "shoal/control/kubernetes/operator.h"

namespace shoal::kubernetes {
namespace {

using json = nlohmann::json;

struct FakeBackend : OperatorBackend {
  std::mutex mu;
  std::vector<std::string> applied, deleted;
  Status Apply(const std::string& kind, const std::string& manifest) override {
    std::lock_guard l(mu);
    applied.push_back(kind + " " + json::parse(manifest)["metadata"]["name"].get<std::string>());
    return Status::Ok();
  }
  Status Delete(const std::string& kind, const std::string& name) override {
    std::lock_guard l(mu);
    deleted.push_back(kind + " " + name);
    return Status::Ok();
  }
  bool Exists(const std::string&, const std::string& name) override {
    std::lock_guard l(mu);
    for (const auto& a : applied) {
      if (a.ends_with(" " + name)) return true;
    }
    return false;
  }
  std::vector<std::string> Managed(const std::string& kind) override {
    std::lock_guard l(mu);
    std::vector<std::string> names;
    for (const auto& a : applied) {
      if (a.starts_with(kind + " ") &&
          std::find(deleted.begin(), deleted.end(), a) == deleted.end()) {
        names.push_back(a.substr(kind.size() + 1));
      }
    }
    return names;
  }
  void Observe(const std::string&, const std::string&, Observed* o) override {
    o->job = json{{"state", "running"}, {"version", 3}};
  }
};

json FlJob(const std::string& name, int generation) {
  return {{"apiVersion", "shoal.dev/v1"},
          {"kind", "FLJob"},
          {"metadata",
           {{"name", name},
            {"namespace", "ns"},
            {"generation", generation},
            {"resourceVersion", "10"}}},
          {"spec", {{"clients", {{"expected", 2}}}}}};
}

class FakeApiServer {
 public:
  FakeApiServer() {
    objects_["a"] = FlJob("a", 1);
    server_.Get("/apis/shoal.dev/v1/functions", [](const httplib::Request& req, auto& res) {
      if (req.has_param("watch")) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      res.set_content(
          req.has_param("watch") ? "" : R"({"metadata":{"resourceVersion":"10"},"items":[]})",
          "application/json");
    });
    server_.Get("/apis/shoal.dev/v1/fljobs", [this](const httplib::Request& req, auto& res) {
      std::unique_lock l(mu_);
      if (!req.has_param("watch")) {
        ++lists_;
        json items = json::array();
        for (const auto& [n, o] : objects_) items.push_back(o);
        res.set_content(json{{"metadata", {{"resourceVersion", "10"}}}, {"items", items}}.dump(),
                        "application/json");
        return;
      }
      ++watches_;
      watch_from_.push_back(req.get_param_value("resourceVersion"));
      std::string body;
      if (watches_ == 1) {
        body = json{{"type", "ERROR"},
                    {"object", {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}}}}
                   .dump() +
               "\n";
      } else if (watches_ == 2) {
        json b = FlJob("b", 1);
        b["metadata"]["resourceVersion"] = "11";
        objects_["b"] = b;
        json gone = objects_["a"];
        gone["metadata"]["resourceVersion"] = "12";
        objects_.erase("a");
        body = json{{"type", "ADDED"}, {"object", b}}.dump() + "\n" +
               json{{"type", "DELETED"}, {"object", gone}}.dump() + "\n";
      }
      l.unlock();
      if (body.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // timed out
      res.set_content(body, "application/json");
    });
    server_.Patch(R"(/apis/shoal.dev/v1/namespaces/ns/fljobs/(\w+)/status)",
                  [this](const httplib::Request& req, auto& res) {
                    std::lock_guard l(mu_);
                    const std::string name = req.matches[1];
                    content_types_.push_back(req.get_header_value("Content-Type"));
                    if (!objects_.count(name)) {
                      res.status = 404;
                      return;
                    }
                    objects_[name]["status"] = json::parse(req.body)["status"];
                    res.set_content(objects_[name].dump(), "application/json");
                  });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeApiServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::mutex mu_;
  std::map<std::string, json> objects_;
  int lists_ = 0, watches_ = 0;
  std::vector<std::string> watch_from_, content_types_;

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

template <typename F>
bool WaitFor(F f) {
  for (int i = 0; i < 200; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(KubernetesOperator, RelistsOn410AndFollowsWatchEvents) {
  FakeApiServer api;
  const std::string token = testing::TempDir() + "/k8s-token-" + std::to_string(getpid());
  std::ofstream(token) << "t0k3n\n";
  FakeBackend backend;
  OperatorOptions options;
  options.status_interval_ms = 100;
  KubernetesOperator op(KubeClient(KubeConfig{api.url(), token, ""}), &backend, options);
  op.Start();
  // a: listed and deployed; the first watch is 410 Gone: listed again (a is not redeployed,
  // its status says generation 1 was); the second watch adds b and deletes a.
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard l(backend.mu);
    return backend.deleted.size() == 1;
  }));
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard l(api.mu_);
    return api.objects_.count("b") && api.objects_["b"].contains("status");
  }));
  op.Stop();
  std::lock_guard l(api.mu_);
  EXPECT_EQ(api.lists_, 2);
  ASSERT_GE(api.watch_from_.size(), 2u);
  EXPECT_EQ(api.watch_from_[0], "10");
  EXPECT_EQ(api.watch_from_[1], "10");
  EXPECT_EQ(backend.applied, (std::vector<std::string>{"FLJob a", "FLJob b"}));
  EXPECT_EQ(backend.deleted, (std::vector<std::string>{"FLJob a"}));
  const json& st = api.objects_["b"]["status"];
  EXPECT_EQ(st["state"], "Running");
  EXPECT_EQ(st["version"], 3);
  EXPECT_EQ(st["observedGeneration"], 1);
  for (const auto& ct : api.content_types_) EXPECT_EQ(ct, "application/merge-patch+json");
  unlink(token.c_str());
}

}  // namespace
}  // namespace shoal::kubernetes
