// Requests in a real shared-memory pool, as an instance receives them: the fixture base of the
// runtime's and the FL leaf's unit tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "shoal/common/payload.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "shoal/runtime/instance/handler.h"

namespace shoal {

class PoolRequestsTest : public ::testing::Test {
 protected:
  // The pool: `prefix` and this process's id, `bytes` large.
  void MakePool(const std::string& prefix, uint64_t bytes) {
    name_ = prefix + std::to_string(getpid());
    auto p = ShmPool::Create(name_, bytes);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(*p);
  }
  // A request of `body` (content type `ct`) in a pool buffer behind its payload head.
  uint64_t MakeRequest(std::string_view body, std::string_view ct = "text/plain") {
    const size_t off = PayloadBodyOffset(0, 0, ct.size());
    auto b = pool_->Allocate(off + body.size(), 1);
    EXPECT_TRUE(b.ok());
    auto span = pool_->Data(*b);
    WritePayloadHead(span, 3, 0, "", "", ct, body.size());
    std::memcpy(span.data() + off, body.data(), body.size());
    return *b;
  }
  // The POST an instance sees for the buffer at `off`.
  Request View(uint64_t off) {
    PayloadView v = ReadPayload(pool_->Data(off));
    Request r;
    r.method = "POST";
    r.body = v.body;
    r.query = v.query;
    return r;
  }
  std::string Body(uint64_t off) {
    PayloadView v = ReadPayload(pool_->Data(off));
    return std::string(reinterpret_cast<const char*>(v.body.data()), v.body.size());
  }

  std::string name_;
  std::unique_ptr<ShmPool> pool_;
};

}  // namespace shoal
