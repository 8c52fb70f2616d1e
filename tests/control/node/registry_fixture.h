// What the controller's unit tests share: a Function manifest, the admin principal, a registry
// on a fresh state directory (removed after the test) and the control API over it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "shoal/control/node/control_api.h"
#include "shoal/control/node/registry.h"

namespace shoal {

// Function `name` with the builtin echo handler; `extra` is added under spec.
inline std::string Fn(const std::string& name, const std::string& extra = "") {
  return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: " + name +
         "\nspec:\n  handler:\n    builtin: echo\n" + extra;
}

inline const auth::Principal kAdmin{"t0", "admin", auth::Role::kAdmin, "", ""};

class RegistryFixture : public ::testing::Test {
 protected:
  // A fresh state directory (<tmp>/<prefix>-<pid>) and the registry opened on it.
  void OpenRegistry(const std::string& prefix) {
    const auto dir =
        std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    ASSERT_TRUE(std::filesystem::create_directories(dir)) << dir;
    dir_ = dir.string();
    config_.state_dir = dir_;
    reg_ = Open();
    ASSERT_NE(reg_, nullptr);
  }
  std::unique_ptr<FunctionRegistry> Open() {
    auto r = FunctionRegistry::Open(config_);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(*r) : nullptr;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string dir_;  // the state directory this fixture made
  NodeConfig config_;
  std::unique_ptr<FunctionRegistry> reg_;
};

// The control API over the registry, called as the admin.
class ControlApiFixture : public RegistryFixture {
 protected:
  void TearDown() override {
    api_.reset();  // before the fixture's runtime and job service it points at
    RegistryFixture::TearDown();
  }
  HttpReply Call(std::string_view method, std::string_view path, std::string_view body = {},
                 std::string_view query = {}) {
    return api_->Handle(method, path, query, body, kAdmin);
  }
  static nlohmann::json Body(const HttpReply& r) {
    EXPECT_EQ(r.content_type, "application/json");
    return nlohmann::json::parse(r.body);
  }

  std::unique_ptr<ControlApi> api_;
};

}  // namespace shoal
