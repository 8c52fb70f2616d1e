// FedCompassScheduler with scripted arrival times; every expected number is worked out from
// FL-ALGORITHMS.md (Q_max = 100, Q_min = 20, λ = 1.5, m = 0.9) in the comments.
#include "shoal/fl/algorithms/compass_scheduler.h"

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

// A replay checked against APPFL's CompassScheduler (src/appfl/scheduler/compass_scheduler.py,
// the FedCompass authors' implementation): three clients whose true step times are C 0.5 s,
// B 2.0 s, A 2.5 s, each arriving exactly `steps x step time` after it was assigned, so every
// measured speed equals the true one. Each expectation is APPFL's rule applied by hand:
//   speed:  first arrival: (now - start) / Q_max; later: 0.1 speed + 0.9 (now - assigned) / Q.
//   join:   Q = floor((T_e - now) / speed) for every group, oldest first; keep Q in
//           [Q_min, Q_max] and not below the best so far (a tie goes to the newer group).
//   create: for each group with now < T_l: est = T_l + (its fastest member's speed) Q_max,
//           Q = floor((est - now) / speed), kept if Q <= Q_max; the largest; raised to Q_min;
//           none: Q_max. T_e = now + Q speed, T_l = now + Q speed 1.5.
//   group:  the last member arriving by T_l aggregates it; members are reassigned fastest first.
TEST(FedCompassScheduler, ReplaysAnArrivalSequenceAsAppflsSchedulerDecidesIt) {
  FedCompassScheduler s(Params());
  s.Start(0);
  // t=50, C's first arrival: 50/100 = 0.5 s/step. Applied alone; no group → group 0 with
  // Q_max: T_e = 50 + 50 = 100, T_l = 50 + 75 = 125.
  auto d = Arrive(s, C, 50);
  EXPECT_EQ(d.action, CompassAction::kApplyAlone);
  EXPECT_EQ(d.assignments, (std::vector<CompassAssignment>{{C, 100, 0}}));
  ExpectGroup(s, 0, 100, 125);
  // t=100: C, alone in group 0, completes it → aggregated; reassigned to a new group 1 (no
  // other group): Q_max, T_e 150, T_l 175. t=150: the same → group 2, T_e 200, T_l 225.
  d = Arrive(s, C, 100);
  EXPECT_EQ(d.action, CompassAction::kAggregateGroup);
  EXPECT_EQ(d.assignments, (std::vector<CompassAssignment>{{C, 100, 1}}));
  d = Arrive(s, C, 150);
  EXPECT_EQ(d.assignments, (std::vector<CompassAssignment>{{C, 100, 2}}));
  ExpectGroup(s, 2, 200, 225);
  // t=200, B's first arrival: 2.0 s/step. Join group 2: floor(0 / 2) = 0 < Q_min. Create:
  // group 2 (200 < 225) est = 225 + 0.5 · 100 = 275, Q = floor(75 / 2) = 37 → group 3:
  // T_e = 200 + 74 = 274, T_l = 200 + 111 = 311.
  d = Arrive(s, B, 200);
  EXPECT_EQ(d.action, CompassAction::kApplyAlone);
  EXPECT_EQ(d.assignments, (std::vector<CompassAssignment>{{B, 37, 3}}));
  ExpectGroup(s, 3, 274, 311);
  // t=200, C completes group 2. Join group 3: floor(74 / 0.5) = 148 > Q_max. Create: group 3
  // est = 311 + 2 · 100 = 511, floor(311 / 0.5) = 622 > Q_max, dropped → Q_max → group 4:
  // T_e 250, T_l 275.
  d = Arrive(s, C, 200);
  EXPECT_EQ(d.assignments, (std::vector<CompassAssignment>{{C, 100, 4}}));
  ExpectGroup(s, 4, 250, 275);
  // t=250, A's first arrival: 2.5 s/step. Join: group 3 floor(24 / 2.5) = 9, group 4
  // floor(0) = 0, both < Q_min. Create: group 3 est 511, floor(261 / 2.5) = 104 > Q_max,
  // dropped; group 4 est = 275 + 0.5 · 100 = 325, floor(75 / 2.5) = 30 → group 5:
  // T_e = 250 + 75 = 325, T_l = 250 + 112.5 = 362.5.
  d = Arrive(s, A, 250);
  EXPECT_EQ(d.assignments, (std::vector<CompassAssignment>{{A, 30, 5}}));
  ExpectGroup(s, 5, 325, 362.5);
  // t=250, C completes group 4. Join: group 3 floor(24 / 0.5) = 48 ∈ [20, 100]; group 5
  // floor(75 / 0.5) = 150 > Q_max → group 3 with 48 steps.
  d = Arrive(s, C, 250);
  EXPECT_EQ(d.assignments, (std::vector<CompassAssignment>{{C, 48, 3}}));
  EXPECT_EQ(s.group(3)->waiting, (std::vector<ClientId>{B, C}));
  // t=274 = 200 + 37 · 2: B in group 3 (before T_l 311), C still out → it waits.
  EXPECT_EQ(Arrive(s, B, 274).action, CompassAction::kBufferedInGroup);
  // t=274 = 250 + 48 · 0.5: C completes group 3 → aggregated; reassigned fastest first, C then B.
  // C: join group 5 floor(51 / 0.5) = 102 > Q_max. Create: group 5 est = 362.5 + 2.5 · 100 =
  // 612.5, floor(338.5 / 0.5) = 677, dropped → Q_max → group 6: T_e 324, T_l 349.
  // B: group 5 floor((325 − 274) / 2) = 25, group 6 floor((324 − 274) / 2) = 25: a tie, and
  // APPFL keeps the newer group, 6 (so B arrives with C, not with A).
  d = Arrive(s, C, 274);
  EXPECT_EQ(d.action, CompassAction::kAggregateGroup);
  EXPECT_EQ(d.group, 3u);
  EXPECT_EQ(d.group_updates, (std::vector<CompassUpdateRef>{{B, 7}, {C, 8}}));
  EXPECT_EQ(d.assignments, (std::vector<CompassAssignment>{{C, 100, 6}, {B, 25, 6}}));
  ExpectGroup(s, 6, 324, 349);
  EXPECT_EQ(s.group(5)->waiting, (std::vector<ClientId>{A}));
  EXPECT_DOUBLE_EQ(*s.speed(A), 2.5);
  EXPECT_DOUBLE_EQ(*s.speed(B), 2.0);
  EXPECT_DOUBLE_EQ(*s.speed(C), 0.5);
}

// Members with the same speed are reassigned in the order they arrived (APPFL sorts the
// group's arrived clients by speed with Python's stable sort), not by client id.
TEST(FedCompassScheduler, EqualSpeedsAreReassignedInArrivalOrder) {
  FedCompassScheduler s(Params());
  s.Start(0);
  Arrive(s, B, 100);  // 1 s/step: group 0, Q_max, T_e 200
  Arrive(s, A, 100);  // 1 s/step: joins group 0 with floor(100 / 1) = 100
  EXPECT_EQ(Arrive(s, B, 200).action, CompassAction::kBufferedInGroup);
  auto d = Arrive(s, A, 200);
  ASSERT_EQ(d.action, CompassAction::kAggregateGroup);
  EXPECT_EQ(d.assignments, (std::vector<CompassAssignment>{{B, 100, 1}, {A, 100, 1}}));
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
