// The pieces of a gateway loop's dispatch: the pending-request slab, the descriptor outbox,
// the cross-loop inbox and the control threads.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shoal/dataplane/gateway/control_worker.h"
#include "shoal/dataplane/gateway/descriptor_outbox.h"
#include "shoal/dataplane/gateway/fl_tickets.h"
#include "shoal/dataplane/gateway/gateway.h"
#include "shoal/dataplane/gateway/loop_inbox.h"
#include "shoal/dataplane/gateway/pending_requests.h"

namespace shoal {
namespace {

TEST(PendingSlab, RequestIdsCarryTheGenerationSoReusedSlotsRejectLateAnswers) {
  PendingSlab slab(4);
  const uint32_t a = slab.Alloc();
  const uint32_t b = slab.Alloc();
  EXPECT_NE(a, b);
  EXPECT_EQ(slab.in_use(), 2u);
  const uint64_t id_a = slab.RequestId(a);
  EXPECT_EQ(id_a & 0xFFFFFFFFu, a);
  EXPECT_EQ(id_a >> 32, 1u);
  slab[a].buffer = 77;
  slab[a].queued = true;
  slab[a].control = true;
  slab[a].fl_ticket = 9;

  uint32_t idx = 0;
  ASSERT_EQ(slab.Lookup(id_a, &idx), &slab[a]);
  EXPECT_EQ(idx, a);
  slab.Free(a);
  EXPECT_EQ(slab.Lookup(id_a, &idx), nullptr);  // freed
  const uint32_t again = slab.Alloc();
  EXPECT_EQ(again, a);                          // the slot is reused ...
  EXPECT_EQ(slab.Lookup(id_a, &idx), nullptr);  // ... under a new generation
  EXPECT_NE(slab.Lookup(slab.RequestId(again), &idx), nullptr);
  // Free cleared what the slot carried.
  EXPECT_EQ(slab[again].buffer, 0u);
  EXPECT_FALSE(slab[again].queued);
  EXPECT_FALSE(slab[again].control);
  EXPECT_EQ(slab[again].fl_ticket, 0u);
  EXPECT_EQ(slab.Lookup(uint64_t{1} << 32 | 999, &idx), nullptr);  // out of range
  EXPECT_EQ(slab.size(), 2u);
}

// A channel whose targets' queues are full for the first `full_sends` sends; targets in
// `gone` do not exist.
class FakeChannel : public DescriptorChannel {
 public:
  int fd() const override { return -1; }
  Status Send(const EventDescriptor& d) override {
    ++attempts;
    if (gone.count(d.target)) return Unavailable("endpoint " + std::to_string(d.target) + " gone");
    if (full_sends > 0) {
      --full_sends;
      return ResourceExhausted("queue full");
    }
    sent.push_back(d);
    return {};
  }
  Result<size_t> Receive(std::span<EventDescriptor>) override { return size_t{0}; }

  int full_sends = 0;
  int attempts = 0;
  std::set<uint32_t> gone;
  std::vector<EventDescriptor> sent;
};

// The request ids `ch` sent, in the order it sent them.
std::vector<uint64_t> SentIds(const FakeChannel& ch) {
  std::vector<uint64_t> ids;
  for (const EventDescriptor& d : ch.sent) ids.push_back(d.request_id);
  return ids;
}

EventDescriptor To(uint32_t target, uint64_t request_id) {
  EventDescriptor d{};
  d.target = target;
  d.request_id = request_id;
  return d;
}

// A fresh outbox over a fresh FakeChannel for each test.
class DescriptorOutboxTest : public ::testing::Test {
 protected:
  FakeChannel ch;
  DescriptorOutbox outbox{ch};
};

TEST_F(DescriptorOutboxTest, SendsNowWhenItCan) {
  bool queued = true;
  ASSERT_TRUE(outbox.Send(To(5, 1), &queued).ok());
  EXPECT_FALSE(queued);
  EXPECT_EQ(SentIds(ch), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(outbox.empty());
}

TEST_F(DescriptorOutboxTest, KeepsWhatAFullQueueRefusesAndFlushesItInOrder) {
  ch.full_sends = 3;
  bool queued = false;
  ASSERT_TRUE(outbox.Send(To(5, 1), &queued).ok());
  EXPECT_TRUE(queued);
  ASSERT_TRUE(outbox.Send(To(6, 2), &queued).ok());
  EXPECT_TRUE(queued);
  EXPECT_EQ(outbox.size(), 2u);
  EXPECT_FALSE(outbox.Flush());  // still full once
  EXPECT_EQ(outbox.size(), 2u);
  EXPECT_TRUE(outbox.Flush());
  EXPECT_TRUE(outbox.empty());
  EXPECT_EQ(SentIds(ch), (std::vector<uint64_t>{1, 2}));
}

TEST_F(DescriptorOutboxTest, AGoneTargetIsAnErrorNowAndADropLater) {
  ch.gone.insert(9);
  bool queued = true;
  Status st = outbox.Send(To(9, 1), &queued);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "endpoint 9 gone");
  EXPECT_FALSE(queued);
  EXPECT_TRUE(outbox.empty());

  ch.gone.clear();
  ch.full_sends = 2;
  ASSERT_TRUE(outbox.Send(To(7, 2), &queued).ok());
  ASSERT_TRUE(outbox.Send(To(8, 3), &queued).ok());
  ch.gone.insert(7);  // died while its descriptor waited
  EXPECT_TRUE(outbox.Flush());
  EXPECT_EQ(SentIds(ch), (std::vector<uint64_t>{3}));
}

TEST_F(DescriptorOutboxTest, DropForForgetsOnlyThatTarget) {
  ch.full_sends = 3;
  bool queued = false;
  ASSERT_TRUE(outbox.Send(To(1, 1), &queued).ok());
  ASSERT_TRUE(outbox.Send(To(2, 2), &queued).ok());
  ASSERT_TRUE(outbox.Send(To(1, 3), &queued).ok());
  outbox.DropFor(1);
  EXPECT_EQ(outbox.size(), 1u);
  EXPECT_TRUE(outbox.Flush());
  ASSERT_EQ(ch.sent.size(), 1u);
  EXPECT_EQ(ch.sent[0].target, 2u);
}

TEST_F(DescriptorOutboxTest, QueuedDescriptorsGoTogetherInOrderOnlyWhenSent) {
  for (uint64_t i = 1; i <= 5; ++i) outbox.Queue(To(i % 2 ? 5 : 6, i));
  EXPECT_EQ(ch.attempts, 0);  // nothing goes before the loop's check handle sends
  EXPECT_FALSE(outbox.SendQueued());
  EXPECT_EQ(SentIds(ch), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_FALSE(outbox.SendQueued());  // sent once only
  EXPECT_EQ(SentIds(ch), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

TEST_F(DescriptorOutboxTest, AFullTargetsQueuedDescriptorsWaitInOrderWhileOthersGo) {
  outbox.Queue(To(5, 1));
  outbox.Queue(To(6, 2));
  outbox.Queue(To(5, 3));
  outbox.Queue(To(7, 4));
  ch.full_sends = 1;  // target 5's queue refuses request 1
  EXPECT_TRUE(outbox.SendQueued());
  EXPECT_EQ(SentIds(ch), (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(outbox.size(), 2u);  // 1 and 3, for target 5, not tried again now
  EXPECT_EQ(ch.attempts, 3);
  EXPECT_TRUE(outbox.Flush());
  EXPECT_EQ(SentIds(ch), (std::vector<uint64_t>{2, 4, 1, 3}));
}

TEST(DescriptorOutbox, AGoneTargetIsReportedOnceEachAndWhatTheReportQueuesGoesToo) {
  FakeChannel ch;
  std::vector<std::pair<uint64_t, std::string>> failed;
  DescriptorOutbox* self = nullptr;
  DescriptorOutbox outbox(ch, [&](const EventDescriptor& d, const Status& st) {
    failed.emplace_back(d.request_id, st.message());
    if (d.request_id == 2) self->Queue(To(8, 20));  // the failure path routes another request
  });
  self = &outbox;
  ch.gone.insert(9);
  outbox.Queue(To(5, 1));
  outbox.Queue(To(9, 2));
  outbox.Queue(To(9, 3));
  outbox.Queue(To(6, 4));
  EXPECT_FALSE(outbox.SendQueued());
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[0], std::make_pair(uint64_t{2}, std::string("endpoint 9 gone")));
  EXPECT_EQ(failed[1].first, 3u);
  EXPECT_EQ(SentIds(ch), (std::vector<uint64_t>{1, 4, 20}));
}

TEST_F(DescriptorOutboxTest, DropForForgetsQueuedDescriptorsOfThatTargetToo) {
  outbox.Queue(To(1, 1));
  outbox.Queue(To(2, 2));
  outbox.DropFor(1);
  EXPECT_FALSE(outbox.SendQueued());
  EXPECT_EQ(SentIds(ch), (std::vector<uint64_t>{2}));
}

TEST(LoopInbox, EveryItemFromEveryThreadArrivesOnceInEachThreadsOrder) {
  struct Item {
    int thread;
    int seq;
  };
  LoopInbox<Item> inbox;
  constexpr int kThreads = 4, kEach = 5000;
  std::vector<std::thread> producers;
  std::atomic<bool> done{false};
  std::vector<int> next(kThreads, 0);
  size_t drained = 0;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) inbox.Push({t, i});
    });
  }
  auto check = [&](Item& item) {
    ASSERT_EQ(item.seq, next[item.thread]) << "thread " << item.thread;
    ++next[item.thread];
  };
  while (!done) {
    drained += inbox.Drain(check);
    if (drained == size_t{kThreads} * kEach) done = true;
    if (!done) std::this_thread::yield();
  }
  for (auto& p : producers) p.join();
  drained += inbox.Drain(check);
  EXPECT_EQ(drained, size_t{kThreads} * kEach);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next[t], kEach);
}

// A control service whose calls wait until `release` is set; it counts the calls running.
class BlockingService : public HttpService {
 public:
  HttpReply Handle(std::string_view method, std::string_view path, std::string_view query,
                   std::string_view body, const auth::Principal& who,
                   const ServiceHeaders&) override {
    std::unique_lock lock(mu);
    ++running;
    max_running = std::max(max_running, running);
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    --running;
    HttpReply r;
    r.status = 201;
    r.body = std::string(method) + " " + std::string(path) + "?" + std::string(query) + " " +
             std::string(body) + " by " + who.name;
    r.headers.emplace_back("X-Thread", "control");
    return r;
  }
  std::mutex mu;
  std::condition_variable cv;
  int running = 0, max_running = 0;
  bool release = false;
};

TEST(ControlWorker, RunsCallsOffTheCallersThreadAndSeveralAtOnce) {
  BlockingService service;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<ControlCall, HttpReply>> replies;
  std::set<std::thread::id> reply_threads;
  ControlWorker worker(service, 2, [&](const ControlCall& call, HttpReply r) {
    std::lock_guard lock(mu);
    replies.emplace_back(call, std::move(r));
    reply_threads.insert(std::this_thread::get_id());
    cv.notify_all();
  });
  worker.Start();
  for (uint64_t i = 0; i < 2; ++i) {
    ControlCall call;
    call.loop = static_cast<uint32_t>(i);
    call.request_id = 100 + i;
    call.method = "POST";
    call.path = "/v1/jobs/j/join";
    call.query = "q=" + std::to_string(i);
    call.body = "{}";
    call.who.name = "client" + std::to_string(i);
    worker.Submit(std::move(call));  // returns at once: the caller (a loop) goes on
  }
  {
    // Both calls are inside the service at the same time: two threads.
    std::unique_lock lock(service.mu);
    ASSERT_TRUE(
        service.cv.wait_for(lock, std::chrono::seconds(10), [&] { return service.running == 2; }));
    service.release = true;
    service.cv.notify_all();
  }
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return replies.size() == 2; }));
  }
  worker.Stop();
  EXPECT_EQ(service.max_running, 2);
  EXPECT_EQ(reply_threads.count(std::this_thread::get_id()), 0u);
  std::sort(replies.begin(), replies.end(),
            [](const auto& a, const auto& b) { return a.first.request_id < b.first.request_id; });
  for (uint64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(replies[i].first.request_id, 100 + i);
    EXPECT_EQ(replies[i].first.loop, i);
    EXPECT_EQ(replies[i].second.status, 201);
    EXPECT_EQ(replies[i].second.body,
              "POST /v1/jobs/j/join?q=" + std::to_string(i) + " {} by client" + std::to_string(i));
    ASSERT_EQ(replies[i].second.headers.size(), 1u);
  }
}

TEST(ControlWorker, StopDropsWaitingCallsAndRefusesNewOnes) {
  BlockingService service;
  std::atomic<int> replies{0};
  ControlWorker worker(service, 1, [&](const ControlCall&, HttpReply) { ++replies; });
  worker.Start();
  for (int i = 0; i < 3; ++i) worker.Submit(ControlCall{});
  {
    std::unique_lock lock(service.mu);
    ASSERT_TRUE(
        service.cv.wait_for(lock, std::chrono::seconds(10), [&] { return service.running == 1; }));
  }
  std::thread stopper([&] { worker.Stop(); });
  while (worker.waiting() != 0) std::this_thread::yield();  // Stop has dropped them
  {
    std::lock_guard lock(service.mu);
    service.release = true;
  }
  service.cv.notify_all();
  stopper.join();
  // The running call finished and replied; the two waiting ones were dropped.
  EXPECT_EQ(replies.load(), 1);
  worker.Submit(ControlCall{});
  EXPECT_EQ(replies.load(), 1);
}

// Records what the gateway tells the coordinator.
class FakeFl : public FlDataPath {
 public:
  std::string LeafFunction(std::string_view job) override { return "fl." + std::string(job); }
  Result<FlAdmission> Admit(std::string_view, BufferPool&, std::span<const std::byte>,
                            uint64_t) override {
    return FlAdmission{};
  }
  Result<uint64_t> PartialFor(uint64_t ticket, uint32_t instance) override {
    if (ticket == 13) return NotFound("ticket 13 has no partial sum");
    return uint64_t{ticket * 1000 + instance};
  }
  void Completed(uint64_t ticket, int http_status, bool leaf_answered) override {
    completed.push_back({ticket, http_status, leaf_answered});
  }
  struct Done {
    uint64_t ticket;
    int status;
    bool leaf;
  };
  std::vector<Done> completed;
};

TEST(FlTickets, StampNamesThePartialSumAndTheWeight) {
  FakeFl fl;
  FlTickets tickets(&fl);
  Pending p;
  p.fl_ticket = 7;
  p.fl_weight = 0.25f;
  EventDescriptor d{};
  tickets.Stamp(p, 0x41, d);
  EXPECT_EQ(d.aux_offset, 7u * 1000 + 0x41);
  EXPECT_EQ(d.aux_value, 0.25f);

  // Asked once per update (a streamed one is stamped on each body chunk): kept in the slot.
  EXPECT_EQ(p.fl_partial, 7u * 1000 + 0x41);
  EventDescriptor again{};
  tickets.Stamp(p, 0x42, again);
  EXPECT_EQ(again.aux_offset, 7u * 1000 + 0x41);

  // No partial sum: nothing is stamped (the leaf folds nothing).
  Pending q;
  q.fl_ticket = 13;
  q.fl_weight = 0.25f;
  EventDescriptor none{};
  tickets.Stamp(q, 0x41, none);
  EXPECT_EQ(none.aux_offset, 0u);
  EXPECT_EQ(none.aux_value, 0.0f);

  // Not an FL request: untouched.
  Pending plain;
  EventDescriptor untouched{};
  tickets.Stamp(plain, 0x41, untouched);
  EXPECT_EQ(untouched.aux_offset, 0u);
}

TEST(FlTickets, TheCoordinatorHearsEachTicketOnce) {
  FakeFl fl;
  FlTickets tickets(&fl);
  Pending p;
  p.fl_ticket = 5;
  tickets.Finish(p, 200, /*leaf_answered=*/true);
  tickets.Finish(p, 504);  // a later path (timeout) finds the ticket gone
  Pending plain;
  tickets.Finish(plain, 502);
  ASSERT_EQ(fl.completed.size(), 1u);
  EXPECT_EQ(fl.completed[0].ticket, 5u);
  EXPECT_EQ(fl.completed[0].status, 200);
  EXPECT_TRUE(fl.completed[0].leaf);
  EXPECT_EQ(p.fl_ticket, 0u);
}

}  // namespace
}  // namespace shoal
