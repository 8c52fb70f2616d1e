// FedCompassScheduler with scripted arrival times; every expected number is worked out from
// FL-ALGORITHMS.md (Q_max = 100, Q_min = 20, λ = 1.5, m = 0.9) in the comments.
#include "shoal/aggregator/compass_scheduler.h"

#include <gtest/gtest.h>

namespace shoal::aggregator {
namespace {

constexpr ClientId A = 1, B = 2, C = 3;

FedCompassParams Params() {
  FedCompassParams p;
  p.num_clients = 3;
  return p;
}

CompassDecision Arrive(FedCompassScheduler& s, ClientId c, double now) {
  auto d = s.OnArrival(c, now);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : CompassDecision{};
}

void ExpectGroup(const FedCompassScheduler& s, GroupId g, double t_e, double t_l) {
  auto v = s.group(g);
  ASSERT_TRUE(v.has_value()) << "group " << g;
  EXPECT_NEAR(v->expected_arrival, t_e, 1e-9);
  EXPECT_NEAR(v->latest_arrival, t_l, 1e-9);
}

TEST(FedCompassScheduler, FirstArrivalsAppliedAloneAndGrouped) {
  FedCompassScheduler s(Params());
  s.Start(0);
  // A: 100 s for Q_max = 100 steps → 1 s/step; applied alone; no group yet → a new group with
  // Q_max: T_e = 100 + 100, T_l = 100 + 150.
  auto a = Arrive(s, A, 100);
  EXPECT_EQ(a.action, CompassAction::kApplyAlone);
  EXPECT_EQ(a.update_id, 0u);
  ASSERT_EQ(a.assignments.size(), 1u);
  EXPECT_EQ(a.assignments[0], (CompassAssignment{A, 100, 0}));
  EXPECT_DOUBLE_EQ(*s.speed(A), 1.0);
  ExpectGroup(s, 0, 200, 250);
  EXPECT_EQ(s.NextTimer(), 250.0);
  // B: 1.5 s/step; joins group 0 with Q = ⌊(200 − 150)/1.5⌋ = 33 ∈ [20, 100].
  auto b = Arrive(s, B, 150);
  EXPECT_EQ(b.action, CompassAction::kApplyAlone);
  EXPECT_EQ(b.assignments[0], (CompassAssignment{B, 33, 0}));
  EXPECT_EQ(s.group(0)->waiting, (std::vector<ClientId>{A, B}));
  EXPECT_EQ(s.open_groups(), (std::vector<GroupId>{0}));
}

TEST(FedCompassScheduler, LastMemberTriggersAggregationAndFastestIsReassignedFirst) {
  FedCompassScheduler s(Params());
  s.Start(0);
  Arrive(s, A, 100);  // 1 s/step, group 0 (T_e 200, T_l 250), Q = 100
  Arrive(s, B, 150);  // 1.5 s/step, joins group 0 with Q = 33
  // A: measured (190 − 100)/100 = 0.9; speed = 0.1 · 1 + 0.9 · 0.9 = 0.91.
  auto a = Arrive(s, A, 190);
  EXPECT_EQ(a.action, CompassAction::kBufferedInGroup);
  EXPECT_EQ(a.group, 0u);
  EXPECT_TRUE(a.assignments.empty());
  EXPECT_NEAR(*s.speed(A), 0.91, 1e-12);
  // A client cannot arrive twice while its update waits in the group.
  EXPECT_FALSE(s.OnArrival(A, 195).ok());
  // B: measured (205 − 150)/33 = 1.6667; speed = 0.1 · 1.5 + 0.9 · 55/33 = 1.65. Last member:
  // aggregate group 0, then reassign A (0.91 s/step) before B (1.65).
  auto b = Arrive(s, B, 205);
  EXPECT_NEAR(*s.speed(B), 0.15 + 0.9 * 55.0 / 33.0, 1e-12);
  EXPECT_EQ(b.action, CompassAction::kAggregateGroup);
  EXPECT_EQ(b.group, 0u);
  EXPECT_EQ(b.group_updates, (std::vector<CompassUpdateRef>{{A, 2}, {B, 3}}));
  EXPECT_TRUE(b.general_updates.empty());
  // A: no open group → new group 1 with Q_max: T_e = 205 + 91, T_l = 205 + 136.5.
  // B: joins group 1 with Q = ⌊(296 − 205)/1.65⌋ = ⌊55.15⌋ = 55.
  ASSERT_EQ(b.assignments.size(), 2u);
  EXPECT_EQ(b.assignments[0], (CompassAssignment{A, 100, 1}));
  EXPECT_EQ(b.assignments[1], (CompassAssignment{B, 55, 1}));
  EXPECT_EQ(s.open_groups(), (std::vector<GroupId>{1}));
  ExpectGroup(s, 1, 296, 341.5);
}

TEST(FedCompassScheduler, NewGroupFromTheLatestTimeEstimate) {
  FedCompassScheduler s(Params());
  s.Start(0);
  Arrive(s, A, 100);  // group 0: T_e 200, T_l 250, fastest member 1 s/step
  // B: 1.8 s/step; join would need Q = ⌊(200 − 180)/1.8⌋ = 11 < Q_min → new group. Estimate
  // group 0's next arrival: T_l + 1 · Q_max = 350; Q = ⌊(350 − 180)/1.8⌋ = ⌊94.4⌋ = 94.
  auto b = Arrive(s, B, 180);
  EXPECT_EQ(b.assignments[0], (CompassAssignment{B, 94, 1}));
  ExpectGroup(s, 1, 180 + 94 * 1.8, 180 + 94 * 1.8 * 1.5);
}

TEST(FedCompassScheduler, NewGroupStepsClampedUpToQmin) {
  FedCompassParams p = Params();
  p.q_min = 95;  // the estimate above (94) falls below it
  FedCompassScheduler s(p);
  s.Start(0);
  Arrive(s, A, 100);
  auto b = Arrive(s, B, 180);
  EXPECT_EQ(b.assignments[0], (CompassAssignment{B, 95, 1}));
  ExpectGroup(s, 1, 180 + 95 * 1.8, 180 + 95 * 1.8 * 1.5);
}

TEST(FedCompassScheduler, QmaxWhenNoGroupIsBeforeItsLatestTime) {
  FedCompassScheduler s(Params());
  s.Start(0);
  Arrive(s, A, 100);  // group 0: T_e 200, T_l 250
  // C arrives at 260 (2.6 s/step) before the coordinator fired group 0's timer: no group to join
  // (T_e passed) and none before its T_l to estimate from → Q_max.
  auto c = Arrive(s, C, 260);
  EXPECT_EQ(c.assignments[0], (CompassAssignment{C, 100, 1}));
  ExpectGroup(s, 1, 260 + 260, 260 + 390);
}

TEST(FedCompassScheduler, LateArrivalGoesToGeneralBufferAndTimerAggregatesArrivedMembers) {
  FedCompassScheduler s(Params());
  s.Start(0);
  Arrive(s, A, 100);            // 1 s/step; group 0: T_e 200, T_l 250
  Arrive(s, B, 150);            // 1.5 s/step; Q = 33
  auto c0 = Arrive(s, C, 155);  // 1.55 s/step; Q = ⌊45/1.55⌋ = 29
  EXPECT_EQ(c0.assignments[0], (CompassAssignment{C, 29, 0}));
  // A: measured 0.95 → speed 0.1 + 0.855 = 0.955. B: measured 90/33 → 0.15 + 0.9 · 90/33.
  EXPECT_EQ(Arrive(s, A, 195).action, CompassAction::kBufferedInGroup);
  EXPECT_EQ(Arrive(s, B, 240).action, CompassAction::kBufferedInGroup);
  const double speed_a = 0.955, speed_b = 0.15 + 0.9 * 90.0 / 33.0;
  ASSERT_EQ(s.NextTimer(), 250.0);
  EXPECT_TRUE(s.OnTimer(249.9).empty());
  // The T_l timer: aggregate A and B (C missing); A then B reassigned.
  auto fired = s.OnTimer(250);
  ASSERT_EQ(fired.size(), 1u);
  const CompassDecision& t = fired[0];
  EXPECT_EQ(t.action, CompassAction::kAggregateGroup);
  EXPECT_EQ(t.group, 0u);
  EXPECT_EQ(t.group_updates, (std::vector<CompassUpdateRef>{{A, 3}, {B, 4}}));
  // A: new group 1, T_e = 250 + 95.5, T_l = 250 + 143.25. B: Q = ⌊95.5/2.6045⌋ = 36.
  ASSERT_EQ(t.assignments.size(), 2u);
  EXPECT_EQ(t.assignments[0], (CompassAssignment{A, 100, 1}));
  EXPECT_EQ(t.assignments[1], (CompassAssignment{B, 36, 1}));
  ExpectGroup(s, 1, 250 + 100 * speed_a, 250 + 150 * speed_a);
  EXPECT_FALSE(s.group(0).has_value());

  // C arrives at 300, after its group's T_l: general buffer, answered at once. Speed:
  // measured (300 − 155)/29 = 5 → 0.155 + 4.5 = 4.655. Join group 1 needs
  // ⌊(345.5 − 300)/4.655⌋ = 9 < Q_min; estimate from group 1: T_l + 0.955 · 100 = 488.75,
  // Q = ⌊188.75/4.655⌋ = 40 → group 2.
  auto c = Arrive(s, C, 300);
  EXPECT_EQ(c.action, CompassAction::kBufferedGeneral);
  EXPECT_NEAR(*s.speed(C), 4.655, 1e-12);
  EXPECT_EQ(c.assignments[0], (CompassAssignment{C, 40, 2}));
  ExpectGroup(s, 2, 300 + 40 * 4.655, 300 + 40 * 4.655 * 1.5);
  EXPECT_EQ(s.general_buffer_size(), 1u);

  // Group 1 completes: its updates plus the general buffer (C's) in one aggregation.
  EXPECT_EQ(Arrive(s, A, 345).action, CompassAction::kBufferedInGroup);
  auto b = Arrive(s, B, 350);
  EXPECT_EQ(b.action, CompassAction::kAggregateGroup);
  EXPECT_EQ(b.group, 1u);
  EXPECT_EQ(b.group_updates, (std::vector<CompassUpdateRef>{{A, 6}, {B, 7}}));
  EXPECT_EQ(b.general_updates, (std::vector<CompassUpdateRef>{{C, 5}}));
  EXPECT_EQ(s.general_buffer_size(), 0u);
  (void)speed_b;
}

TEST(FedCompassScheduler, ArrivalAfterLatestTimeBeforeTheTimerFired) {
  FedCompassScheduler s(Params());
  s.Start(0);
  Arrive(s, A, 100);           // group 0: T_l 250
  Arrive(s, B, 150);           // joins group 0
  auto a = Arrive(s, A, 260);  // after T_l: late even though the timer has not run yet
  EXPECT_EQ(a.action, CompassAction::kBufferedGeneral);
  EXPECT_EQ(s.group(0)->waiting, (std::vector<ClientId>{B}));
  // Nobody arrived in time: the timer closes group 0 without an aggregation.
  EXPECT_TRUE(s.OnTimer(260).empty());
  EXPECT_FALSE(s.group(0).has_value());
  EXPECT_EQ(Arrive(s, B, 270).action, CompassAction::kBufferedGeneral);
  EXPECT_EQ(s.general_buffer_size(), 2u);
}

TEST(FedCompassScheduler, RefusesArrivalsBeforeStart) {
  FedCompassScheduler s(Params());
  auto d = s.OnArrival(A, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::aggregator

namespace shoal::aggregator {
namespace {

// The checkpoint keeps the scheduler: a copy loaded from Save() decides exactly as the original.
TEST(FedCompassScheduler, SavedStateLoadsIntoASchedulerThatDecidesTheSame) {
  FedCompassScheduler s(Params());
  s.Start(0);
  Arrive(s, A, 100);
  Arrive(s, B, 150);
  Arrive(s, C, 400);
  FedCompassScheduler copy(Params());
  ASSERT_TRUE(copy.Load(s.Save()).ok());
  EXPECT_EQ(copy.Save(), s.Save());
  EXPECT_EQ(copy.speed(B), s.speed(B));
  EXPECT_EQ(copy.open_groups(), s.open_groups());
  auto x = s.OnArrival(A, 500);
  auto y = copy.OnArrival(A, 500);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->action, y->action);
  EXPECT_EQ(x->assignments, y->assignments);
  EXPECT_EQ(x->update_id, y->update_id);
  EXPECT_EQ(s.NextTimer(), copy.NextTimer());
  EXPECT_FALSE(copy.Load("{\"start\": 1}").ok());
}

}  // namespace
}  // namespace shoal::aggregator
