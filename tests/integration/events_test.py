"""GET /v1/events, the control listener's server-sent-events stream, against a live shoald.

What is checked: 401 without a token or ticket and for an unknown ticket; a ticket of
POST /v1/events/ticket opens one stream and is refused the second time and once expired; a
token without the node-read role gets 403; snapshot events arrive at ?interval= with the node,
the functions (as many as /v1/functions lists, with their live status) and the FL jobs in summary;
an FL job's commits arrive as `commit` events while shoal-client trains it; a revoked token's
stream ends at its next tick; the 17th concurrent stream gets 503 and a freed place is taken again.

Run by ctest (console.events) as root: shoald needs root.
"""

import http.client as httpclient
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import (StandaloneShoald, digits_fljob, fl_client_env,  # noqa: E402
                           shoal_client_argv, skip_reason)

MAX_STREAMS = 16  # ControlServer::kMaxEventStreams
TICKET_LIFETIME_S = 30  # ControlServer::kTicketLifetime

FLJOB = digits_fljob("fedavg", hidden=16, clients=2, rounds=6, local_steps=2,
                     max_fan_in=2, max_leaves=1)

ECHO = """apiVersion: shoal.dev/v1
kind: Function
metadata: {name: echo}
spec:
  handler: {builtin: echo}
  scale: {min: 1, max: 2}
"""


class Stream:
    """One GET /v1/events connection, read event by event."""

    def __init__(self, port, query="", token=None, timeout=15):
        self.conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=timeout)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.conn.request("GET", "/v1/events" + query, headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status

    def body(self):
        return self.resp.read().decode(errors="replace")

    def next(self):
        """(event name, data) of the next event; None at the end of the stream."""
        name, data = None, []
        while True:
            line = self.resp.readline()
            if not line:
                return None
            line = line.decode().rstrip("\n")
            if line == "":
                if name or data:
                    return name or "message", "\n".join(data)
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)

    def next_named(self, wanted):
        while True:
            e = self.next()
            if e is None or e[0] == wanted:
                return e

    def close(self):
        self.conn.close()


@pytest.fixture(scope="module")
def node():
    reason = skip_reason(("shoald", "shoal", "shoal-client"))
    if reason:
        pytest.skip(reason)
    tmp = tempfile.mkdtemp(prefix="shoal-events-")
    d = None
    try:
        d = StandaloneShoald(tmp, f"ev{os.getpid()}")
        d.tmp = tmp
        for manifest in (ECHO, FLJOB):
            d.deploy(manifest)
        yield d
    finally:
        if d:
            d.close()
        shutil.rmtree(tmp, ignore_errors=True)


def api(node, path, data=None, method=None, token=None):
    code, body = node.api.request(path, data=data, method=method, token=token)
    return code, (json.loads(body) if body.strip().startswith(("{", "[")) else body)


def create_token(node, role, **scope):
    code, j = api(node, "/v1/tokens", data=json.dumps({"role": role, **scope}).encode())
    assert code == 201, j
    return j


def ticket(node, token=None):
    code, j = api(node, "/v1/events/ticket", data=b"", method="POST", token=token)
    assert code == 201, j
    assert re.fullmatch(r"[0-9a-f]{48}", j["ticket"]) and j["expires_in_s"] == TICKET_LIFETIME_S
    return j["ticket"]


def test_tickets_and_tokens(node):
    expiring = ticket(node)  # checked at the end, once its lifetime is over
    issued = time.monotonic()

    s = Stream(node.control_port)
    assert s.status == 401 and "authentication required" in s.body()
    s = Stream(node.control_port, "?ticket=" + "0" * 48)
    assert s.status == 401 and "ticket" in json.loads(s.body())["error"]
    s = Stream(node.control_port, token="shoal_not_a_token")
    assert s.status == 401

    # A ticket opens one stream; the same ticket again is refused.
    t = ticket(node)
    s = Stream(node.control_port, "?ticket=" + t)
    assert s.status == 200 and s.resp.getheader("Content-Type").startswith("text/event-stream")
    name, data = s.next_named("snapshot")
    assert json.loads(data)["node"]["node"] == node.node
    s.close()
    again = Stream(node.control_port, "?ticket=" + t)
    assert again.status == 401, again.body()

    # Neither the stream nor a ticket for a role that may not read the node.
    fl = create_token(node, "fl-client", job="digits")["token"]
    assert Stream(node.control_port, token=fl).status == 403
    assert api(node, "/v1/events/ticket", data=b"", method="POST", token=fl)[0] == 403
    # Only GET streams, only POST makes tickets; interval is bounded.
    assert api(node, "/v1/events", data=b"", method="POST")[0] == 405
    assert api(node, "/v1/events/ticket")[0] == 405
    for bad in ("0.1", "11", "x", "1s"):
        s = Stream(node.control_port, f"?interval={bad}", token=node.token)
        assert s.status == 400 and "interval" in s.body()

    # A revoked token's stream (opened by its header, or by its ticket) ends at the next tick.
    viewer = create_token(node, "viewer", name="ev-viewer")
    by_header = Stream(node.control_port, "?interval=0.5", token=viewer["token"])
    by_ticket = Stream(node.control_port, "?interval=0.5&ticket=" + ticket(node, viewer["token"]))
    for s in (by_header, by_ticket):
        assert s.status == 200
        assert s.next_named("snapshot") is not None
    assert api(node, f"/v1/tokens/{viewer['id']}", method="DELETE")[0] == 200
    for s in (by_header, by_ticket):
        name, data = s.next_named("end")
        assert "no longer valid" in json.loads(data)["reason"]
        assert s.next() is None  # and the server closed it
        s.close()

    time.sleep(max(0.0, TICKET_LIFETIME_S + 1 - (time.monotonic() - issued)))
    s = Stream(node.control_port, "?ticket=" + expiring)
    assert s.status == 401, s.body()


def test_snapshots_at_the_interval_with_the_api_figures(node):
    s = Stream(node.control_port, "?interval=0.5", token=node.token)
    assert s.status == 200
    assert s.resp.getheader("Cache-Control") == "no-store"
    snaps, times = [], []
    while len(snaps) < 6:
        e = s.next()
        assert e is not None
        if e[0] == "snapshot":
            snaps.append(json.loads(e[1]))
            times.append(time.monotonic())
    s.close()
    # Five periods of 0.5 s after the first (sent at once): not 1 s (the default), not a burst.
    assert 1.5 < times[-1] - times[0] < 4.0, times

    fns = api(node, "/v1/functions")[1]["functions"]
    nd = api(node, "/v1/node")[1]
    last = snaps[-1]
    assert set(last) >= {"node", "functions", "jobs"}
    assert last["node"]["node"] == nd["node"] and last["node"]["functions"] == nd["functions"]
    assert last["node"]["dataplane"] == nd["dataplane"] and "pools" in last["node"]
    assert sorted(f["name"] for f in last["functions"]) == sorted(f["name"] for f in fns)
    assert len(last["functions"]) == nd["functions"]
    echo = next(f for f in last["functions"] if f["name"] == "echo")
    for key in ("desired", "ready", "starting", "inflight", "queued", "rps", "p99_ms",
                "cold_starts", "errors_total", "instances_total"):
        assert key in echo["status"], key
    assert echo["status"]["ready"] == next(f for f in fns if f["name"] == "echo")["status"]["ready"]
    job = next(j for j in last["jobs"] if j["name"] == "digits")
    status = api(node, "/v1/jobs/digits")[1]
    for key in ("name", "algorithm", "state", "version", "best_accuracy", "clients", "updates_total",
                "latest"):
        assert key in job, key
    assert job["state"] == status["state"] and job["algorithm"] == "fedavg"


def test_commits_arrive_as_events_while_a_job_trains(node):
    fl = create_token(node, "fl-client", job="digits")["token"]
    s = Stream(node.control_port, "?interval=10", token=node.token, timeout=60)
    assert s.status == 200
    assert s.next_named("snapshot") is not None  # the first, at once
    trainer = subprocess.Popen(
        shoal_client_argv(node.gw, clients=2, time_scale="0", max_seconds=40, train_threads=1),
        env=fl_client_env(fl),
        stdout=open(os.path.join(node.tmp, "shoal-client.log"), "wb"), stderr=subprocess.STDOUT)
    try:
        versions = []
        deadline = time.time() + 50
        while len(versions) < 3 and time.time() < deadline:
            e = s.next()
            assert e is not None
            if e[0] == "commit":
                c = json.loads(e[1])
                assert c["job"] == "digits"
                versions.append(c["version"])
        # Several commits within one 10 s interval: sent as they land, in order.
        assert len(versions) >= 3 and versions == sorted(versions) and versions[0] >= 1, versions
        assert api(node, "/v1/jobs/digits")[1]["version"] >= versions[-1]
    finally:
        s.close()
        trainer.wait(timeout=60)


def test_the_17th_stream_gets_503(node):
    streams = [Stream(node.control_port, "?interval=0.5", token=node.token)
               for _ in range(MAX_STREAMS)]
    try:
        assert [s.status for s in streams] == [200] * MAX_STREAMS
        extra = Stream(node.control_port, "?interval=0.5", token=node.token)
        assert extra.status == 503 and "too many event streams" in json.loads(extra.body())["error"]
        assert extra.resp.getheader("Retry-After")
        # The rest of /v1 still answers while every stream is taken.
        assert api(node, "/v1/node")[0] == 200
        # A closed stream's place is free again after its next tick.
        streams.pop().close()
        deadline = time.time() + 10
        while True:
            again = Stream(node.control_port, "?interval=0.5", token=node.token)
            if again.status == 200 or time.time() > deadline:
                break
            again.body()
            time.sleep(0.3)
        assert again.status == 200
        streams.append(again)
    finally:
        for s in streams:
            s.close()
