"""APPFL 1.12's own FedCompass scheduler (appfl.algorithm.scheduler.CompassScheduler with its
FedCompassAggregator) run in virtual time, writing the trace Shoal's FedCompassScheduler is
checked against (bench-fl-appfl's fidelity table, tests/data/fedcompass/*.trace).

The real classes run unchanged: only the scheduler module's clock (time.time) and its timer
(threading.Timer) are replaced, so T_l timers fire in virtual time, in order with the arrivals.
Clients are simulated: client k needs steps x its seconds per step x a per-round jitter factor
(lognormal) to train, then arrives; its next assignment starts when the scheduler answers it (at
once, or when its group is aggregated, by its last member or by the T_l timer).

Trace lines (times as %.17g, so a replay reads back the same doubles):
  A <client> <t> alone -> <client>:<steps>:<group>
  A <client> <t> general -> <client>:<steps>:<group>
  A <client> <t> wait <group>
  A <client> <t> aggregate <group> members=<c,..> general=<c,..> -> <c>:<steps>:<group> ...
  T <t> aggregate <group> members=<c,..> general=<c,..> -> ...   (a T_l timer that aggregated)
  T <t> none                                                     (a T_l timer that did nothing)
Header lines start with '#'; '# params' names N, Q_min, Q_max, lambda, momentum.
"""

import argparse
import heapq
import itertools
import sys
import threading
import types

import numpy as np
import torch
from omegaconf import OmegaConf

from appfl.algorithm.aggregator import FedCompassAggregator
from appfl.algorithm.scheduler import CompassScheduler
import appfl.algorithm.scheduler.compass_scheduler as compass_module

# APPFL 1.12's FedCompass defaults: the scheduler's (it has no defaults in code: every key is
# required) and the aggregator's as in APPFL's example examples/resources/configs/mnist/
# server_fedcompass.yaml; alpha 0.9 is also FedCompassAggregator's code default.
SCHEDULER_DEFAULTS = dict(max_local_steps=100, min_local_steps=20, speed_momentum=0.9,
                          latest_time_factor=1.5, same_init_model=True)
AGGREGATOR_DEFAULTS = dict(staleness_fn="polynomial", staleness_fn_kwargs={"a": 0.5},
                           alpha=0.9, gradient_based=True)

SCENARIOS = {
    # name: (clients, speed distribution, jitter sigma)
    "uniform5": (5, "uniform:0.5,2.0", 0.15),
    "lognormal16": (16, "lognormal:1.0", 0.25),
    "stragglers8": (8, "exponential:1.0", 0.35),
}


class VirtualClock:
    def __init__(self):
        self.now = 0.0
        self.seq = itertools.count()
        self.heap = []  # (time, seq, kind, payload)

    def time(self):
        return self.now

    def push(self, t, kind, payload):
        heapq.heappush(self.heap, (float(t), next(self.seq), kind, payload))


CLOCK = VirtualClock()


class VirtualTimer:
    """threading.Timer's interface; fires from the event loop at now + interval."""

    def __init__(self, interval, function, args=None, kwargs=None):
        self.fire_at = CLOCK.now + interval
        self.function, self.args, self.kwargs = function, args or (), kwargs or {}
        self.cancelled = False

    def start(self):
        CLOCK.push(self.fire_at, "timer", self)

    def cancel(self):
        self.cancelled = True


compass_module.time = types.SimpleNamespace(time=CLOCK.time)
compass_module.threading = types.SimpleNamespace(Lock=threading.Lock, Timer=VirtualTimer)


def draw_speeds(spec, n, rng):
    kind, _, args = spec.partition(":")
    a = [float(x) for x in args.split(",")]
    if kind == "uniform":
        return rng.uniform(a[0], a[1], n)
    if kind == "lognormal":
        return 0.05 * np.exp(rng.normal(0.0, a[0], n))
    if kind == "exponential":
        return 0.02 + rng.exponential(a[0] * 0.05, n)
    raise ValueError(spec)


def ids(xs):
    return ",".join(str(x) for x in xs)


def run(scenario, seed, events, out):
    clients, speed_spec, jitter = SCENARIOS[scenario]
    rng = np.random.default_rng(seed)
    speeds = draw_speeds(speed_spec, clients, rng)

    agg = FedCompassAggregator(model=None, aggregator_configs=OmegaConf.create(
        dict(AGGREGATOR_DEFAULTS, num_clients=clients)), logger=None)
    sched = CompassScheduler(OmegaConf.create(dict(SCHEDULER_DEFAULTS, num_clients=clients)),
                             agg, logger=None)
    agg.global_state = {"w": torch.zeros(4)}  # the model: any tensors do

    # Record what the real methods do, in call order.
    log = {"assign": [], "agg": []}
    late = []  # every late (general-buffer) update since the last group aggregation
    real_assign, real_group_agg = sched._assign_group, sched._group_aggregation

    def assign(client_id, **kw):
        real_assign(client_id, **kw)
        info = sched.client_info[client_id]
        log["assign"].append((client_id, info["local_steps"], info["goa"]))

    def group_aggregation(group_idx, **kw):
        if group_idx in sched.arrival_group and group_idx in sched.group_buffer:
            members = list(sched.group_buffer[group_idx]["local_models"])
            # APPFL's general buffer is a dict by client, merged under the group's: what it
            # aggregates of the late updates, against every late update since the last group.
            kept = [c for c in sched.general_buffer["local_models"] if c not in members]
            log["agg"].append((group_idx, members, list(late), kept))
            late.clear()
        real_group_agg(group_idx, **kw)

    sched._assign_group = assign
    sched._group_aggregation = group_aggregation

    def take():
        a = " ".join(f"{c}:{s}:{g}" for c, s, g in log["assign"])
        aggs = log["agg"]
        log["assign"], log["agg"] = [], []
        return a, aggs

    dropped = []

    def agg_text(aggs):
        assert len(aggs) == 1, aggs
        g, members, general, kept = aggs[0]
        if len(kept) != len(general):
            dropped.append(f"# dropped at group {g}: late updates from {ids(general)}, "
                           f"APPFL aggregates those of {ids(kept) or 'none'}")
        return f"aggregate {g} members={ids(members)} general={ids(general)}"

    # Every client fetches the initial model at t = 0 (the scheduler's start time).
    for _ in range(clients):
        sched.get_parameters(init_model=True)
    round_no = [0] * clients

    def train(c, steps):
        # The jitter follows (seed, client, round), not the event order.
        r = np.random.default_rng([seed, c, round_no[c]])
        round_no[c] += 1
        CLOCK.push(CLOCK.now + steps * float(speeds[c]) * float(np.exp(r.normal(0.0, jitter))),
                   "arrive", c)

    for c in range(clients):
        train(c, SCHEDULER_DEFAULTS["max_local_steps"])
    pending = {}  # client -> Future

    print(f"# APPFL {__import__('appfl').__version__} CompassScheduler + FedCompassAggregator, "
          f"scenario {scenario}, seed {seed}", file=out)
    print(f"# params clients={clients} q_min={SCHEDULER_DEFAULTS['min_local_steps']} "
          f"q_max={SCHEDULER_DEFAULTS['max_local_steps']} "
          f"lambda={SCHEDULER_DEFAULTS['latest_time_factor']} "
          f"momentum={SCHEDULER_DEFAULTS['speed_momentum']}", file=out)
    print("# speeds " + " ".join("%.6f" % s for s in speeds), file=out)
    written = 0
    while CLOCK.heap and written < events:
        t, _, kind, payload = heapq.heappop(CLOCK.heap)
        CLOCK.now = t
        if kind == "timer":
            if payload.cancelled:
                continue
            payload.function(*payload.args, **payload.kwargs)
            a, aggs = take()
            line = f"T {t!r} none" if not aggs else f"T {t!r} {agg_text(aggs)} -> {a}"
        else:
            c = payload
            had_group = "goa" in sched.client_info.get(c, {})
            res = sched.schedule(c, {"w": torch.ones(4) * 0.01})
            a, aggs = take()
            if isinstance(res, tuple):
                kind_text = "general" if had_group else "alone"
                if had_group:
                    late.append(c)
                line = f"A {c} {t!r} {kind_text} -> {a}"
                train(c, res[1]["local_steps"])
            else:
                pending[c] = res
                if aggs:
                    line = f"A {c} {t!r} {agg_text(aggs)} -> {a}"
                else:
                    line = f"A {c} {t!r} wait {sched.client_info[c]['goa']}"
        # Answered futures: those clients start their next round now.
        for c, f in list(pending.items()):
            if f.done():
                del pending[c]
                train(c, f.result()[1]["local_steps"])
        for d in dropped:
            print(d, file=out)
        dropped.clear()
        print(line, file=out)
        written += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    out = sys.stdout if a.out == "-" else open(a.out, "w")
    run(a.scenario, a.seed, a.events, out)


if __name__ == "__main__":
    main()
