// The cluster library's tests against a real etcd: one member and a client of it, the test
// skipped naming what is missing where etcd is not installed; and waiting for a key to go.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "shoal/control/cluster/etcd_client.h"
#include "tests/support/etcd_for_test.h"

namespace shoal::cluster {

class EtcdFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = testing::EtcdMissing(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(etcd_.Start()) << etcd_.Log(0);
    EtcdOptions o;
    o.endpoints = {etcd_.endpoint(0)};
    o.request_timeout = std::chrono::milliseconds(1000);
    o.connect_timeout = std::chrono::milliseconds(300);
    client_ = std::move(EtcdClient::Create(o).value());
  }

  testing::EtcdForTest etcd_{1};
  std::unique_ptr<EtcdClient> client_;
};

// Whether `key` is gone from etcd within `tries` reads 100 ms apart.
inline bool KeyGone(EtcdClient& client, const std::string& key, int tries) {
  for (int i = 0; i < tries; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto r = client.Get(key);
    if (r.ok() && r->kvs.empty()) return true;
  }
  return false;
}

}  // namespace shoal::cluster
