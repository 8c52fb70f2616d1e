#include "bench/tcp_sink.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "bench/update_sender.h"

namespace shoal::bench {
namespace {

TEST(TcpSink, ReceivesEveryBodyOnEveryConnectionAndAnswers200) {
  const std::string body(1 << 20, 'x');
  TcpSink sink(body.size(), 3);
  std::vector<std::thread> senders;
  std::vector<int> ok(3, 0);
  for (int s = 0; s < 3; ++s) {
    senders.emplace_back([&, s] {
      int fd = ConnectLoopback(sink.port());
      ASSERT_GE(fd, 0);
      for (int k = 0; k < 2; ++k) {
        const std::string head = PostHead("/x", body.size());
        ASSERT_TRUE(WriteAll(fd, {{const_cast<char*>(head.data()), head.size()},
                                  {const_cast<char*>(body.data()), body.size()}}));
        ok[s] += ReadResponse(fd) == 200;
      }
      close(fd);
    });
  }
  for (auto& t : senders) t.join();
  EXPECT_EQ(ok, std::vector<int>({2, 2, 2}));
  EXPECT_EQ(sink.received(), 6 * body.size());
}

TEST(TcpSink, ConnectionsBeyondItsBuffersAreClosed) {
  TcpSink sink(16, 1);
  int first = ConnectLoopback(sink.port()), second = ConnectLoopback(sink.port());
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  const std::string req = PostHead("/x", 4) + "abcd";
  ASSERT_TRUE(WriteAll(first, {{const_cast<char*>(req.data()), req.size()}}));
  EXPECT_EQ(ReadResponse(first), 200);
  EXPECT_EQ(ReadResponse(second), 0);  // closed without an answer
  close(first);
  close(second);
}

}  // namespace
}  // namespace shoal::bench
