import json
import socket
import time
import urllib.parse

import numpy as np
import pytest

import shoal_fl
from shoal_fl import JobClient, Membership, RetryPolicy
from shoal_fl.job_client import parse_retry_after

from conftest import parse_update

NO_JITTER = RetryPolicy(jitter=0.0)
MEMBER = Membership("c7", "client-secret")
W = np.arange(6, dtype=np.float32).reshape(2, 3)


def push(jc):
    return jc.push_update(MEMBER, 4, ["w"], [W], 60, local_steps=9, train_seconds=0.25,
                          dtype="bf16")


def test_503_with_retry_after_is_waited_out_then_the_same_body_is_sent_again(fake_server):
    answers = [(503, {"Retry-After": "0.3"}, {"error": "pool full"}),
               (503, {"Retry-After": "0.3"}, {"error": "pool full"}),
               (202, {}, {"version": 4})]
    srv = fake_server(lambda req: answers.pop(0))
    jc = JobClient(srv.url, "my job", "bearer-1", retry=NO_JITTER)
    t0 = time.monotonic()
    assert push(jc) == {"version": 4}
    elapsed = time.monotonic() - t0
    assert 0.6 <= elapsed < 2.0  # the two Retry-Afters, not the 0.1 s back-off
    assert jc.retries == 2
    assert len(srv.requests) == 3
    assert {r.path for r in srv.requests} == {"/v1/jobs/my%20job/updates"}
    bodies = {r.body for r in srv.requests}
    assert len(bodies) == 1  # the retried uploads are byte-identical
    body = bodies.pop()
    r = srv.requests[0]
    assert r.headers["Authorization"] == "Bearer bearer-1"
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert int(r.headers["Content-Length"]) == len(body)
    h, tensors = parse_update(body)
    assert h[1] == [b"my job"] and h[2] == [b"c7"] and h[3] == [b"client-secret"]
    assert h[4] == [4] and h[5] == [60] and h[6] == [9]
    assert tensors[0]["dtype"] == 1 and tensors[0]["shape"] == [2, 3]
    got = np.frombuffer(tensors[0]["bytes"], dtype="<u2").astype(np.uint32) << 16
    assert got.view(np.float32).tolist() == W.reshape(-1).tolist()


def test_503_without_retry_after_backs_off_exponentially(fake_server):
    answers = [(503, {}, {"error": "queue full"})] * 3 + [(200, {}, {"kind": "done"})]
    srv = fake_server(lambda req: answers.pop(0))
    sleeps = []
    jc = JobClient(srv.url, "j", "x", retry=NO_JITTER, sleep=sleeps.append)
    assert jc.task(MEMBER).kind == "done"
    assert sleeps == [0.1, 0.2, 0.4]
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(srv.requests[0].path).query)
    assert q == {"client": ["c7"], "token": ["client-secret"]}


def test_retry_after_ms_in_the_body_and_the_cap(fake_server):
    answers = [(503, {}, {"error": "busy", "retry_after_ms": 250}),
               (429, {"Retry-After": "3600"}, {"error": "slow down"}),
               (200, {}, {"kind": "wait", "retry_after_ms": 100})]
    srv = fake_server(lambda req: answers.pop(0))
    sleeps = []
    jc = JobClient(srv.url, "j", "x", retry=RetryPolicy(jitter=0, max_retry_after=5),
                   sleep=sleeps.append)
    t = jc.task(MEMBER)
    assert (t.kind, t.retry_after_ms) == ("wait", 100)
    assert sleeps == [0.25, 5]


def test_503_forever_gives_up_with_the_servers_message(fake_server):
    srv = fake_server(lambda req: (503, {"Retry-After": "1"}, {"error": "pool 'default' full"}))
    sleeps = []
    jc = JobClient(srv.url, "j", "x", retry=RetryPolicy(attempts=4, jitter=0), sleep=sleeps.append)
    with pytest.raises(shoal_fl.ServiceUnavailable) as e:
        push(jc)
    assert sleeps == [1.0, 1.0, 1.0]
    assert len(srv.requests) == 4
    assert e.value.status == 503 and e.value.retry_after == 1.0
    assert str(e.value) == "POST /v1/jobs/j/updates: HTTP 503: pool 'default' full"


@pytest.mark.parametrize("status,cls", [(400, shoal_fl.BadRequest), (401, shoal_fl.Unauthorized),
                                        (403, shoal_fl.Forbidden), (404, shoal_fl.NotFound),
                                        (409, shoal_fl.StaleUpdate),
                                        (413, shoal_fl.PayloadTooLarge)])
def test_4xx_raises_at_once_with_the_servers_message(fake_server, status, cls):
    msg = "tensor 'w': shape [3,2] expected, got [2,3]"
    srv = fake_server(lambda req: (status, {}, {"error": msg}))
    sleeps = []
    jc = JobClient(srv.url, "j", "x", retry=NO_JITTER, sleep=sleeps.append)
    with pytest.raises(cls) as e:
        push(jc)
    assert len(srv.requests) == 1 and sleeps == []
    assert e.value.status == status and e.value.message == msg
    assert str(e.value) == f"POST /v1/jobs/j/updates: HTTP {status}: {msg}"
    assert isinstance(e.value, shoal_fl.HttpError)


def test_error_body_that_is_not_json_and_a_token_never_in_the_message(fake_server):
    srv = fake_server(lambda req: (404, {}, b"no such job\n"))
    jc = JobClient(srv.url, "j", "x", retry=NO_JITTER)
    with pytest.raises(shoal_fl.NotFound) as e:
        jc.task(MEMBER)
    assert e.value.message == "no such job"
    assert "client-secret" not in str(e.value)  # the query (with the client token) is cut
    assert str(e.value) == "GET /v1/jobs/j/task: HTTP 404: no such job"


def test_join_eval_status_and_model(fake_server):
    from conftest import safetensors_bytes
    model = safetensors_bytes([("z.weight", np.full((2, 2), 3.0)), ("a.bias", np.arange(2.0))],
                              {"shoal.version": "5"})

    def handle(req):
        path = urllib.parse.urlsplit(req.path).path
        if path.endswith("/join"):
            return 200, {}, {"client_id": "c1", "token": "tok"}
        if path.endswith("/eval"):
            return 200, {}, {"ok": True}
        if path.endswith("/model"):
            return 200, {"X-Shoal-Model-Version": "5"}, model
        return 200, {}, {"state": "running", "version": 5}

    srv = fake_server(handle)
    jc = JobClient(srv.url + "/", "j", "x")
    m = jc.join("alice", join_token="jt")
    assert m == Membership("c1", "tok")
    assert json.loads(srv.requests[0].body) == {"name": "alice", "token": "jt"}
    jc.report_eval(m, 5, 0.75, 0.5, 100)
    assert json.loads(srv.requests[1].body) == {"client_id": "c1", "token": "tok", "version": 5,
                                                "accuracy": 0.75, "loss": 0.5, "samples": 100}
    assert jc.status()["version"] == 5
    g = jc.model(5)
    assert srv.requests[-1].path == "/v1/jobs/j/model?version=5"
    assert g.version == 5 and g.metadata == {"shoal.version": "5"}
    assert g.names == ["z.weight", "a.bias"]  # file (data) order, not the JSON's sorted order
    assert g.arrays[0].tolist() == [[3.0, 3.0], [3.0, 3.0]] and g.arrays[1].tolist() == [0, 1]
    g.arrays[0][0, 0] = 1  # writable: no copy needed before training
    # one connection for all of it (keep-alive)
    assert len({r.headers.get("Host") for r in srv.requests}) == 1


def test_no_server_is_connection_failed_after_retries():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    sleeps = []
    jc = JobClient(f"http://127.0.0.1:{port}", "j", "x",
                   retry=RetryPolicy(attempts=3, jitter=0), sleep=sleeps.append)
    with pytest.raises(shoal_fl.ConnectionFailed, match="cannot reach shoald at http://127.0.0.1"):
        jc.status()
    assert sleeps == [0.1, 0.2]


def test_parse_retry_after():
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("garbage") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past


def test_a_kept_alive_connection_the_server_closed_is_replaced_without_back_off(fake_server):
    srv = fake_server(lambda req: (200, {}, {"state": "running", "version": len(srv.requests)}))
    srv.drop_after_reply = True
    sleeps = []
    jc = JobClient(srv.url, "j", "x", retry=NO_JITTER, sleep=sleeps.append)
    assert jc.status()["version"] == 1
    time.sleep(0.05)
    assert jc.status()["version"] == 2
    assert sleeps == [] and jc.retries == 0
