"""The HTTP API against its published schema (api/openapi.json, OpenAPI 3.1) with schemathesis
on a live shoald. shoald serves the document it was built with at GET /v1/openapi.json (no
token), byte for byte the file. Then schemathesis runs every documented operation with generated
valid and invalid inputs (examples, coverage and fuzzing phases, a fixed seed, a bounded number
of cases per operation) with the admin token: the public operations (fleet, invoke, inference,
health) against the public port, then the control listener's (tag control) against the control
port, its DELETEs last (they remove what the other cases name). Any 5xx, any status the schema
does not list for the operation, any body, header or Content-Type that does not match it fails
the test; schemathesis' own report is printed on failure.

Resources the schema's examples name exist: function `echo` (builtin echo), FL job `digits`
(never trained: its task and model answer as for a job waiting for clients) and OIP model `mlp`
(tests/data/inference/mlp.onnx). GET /v1/events (tag stream) is left out of schemathesis' runs:
its answer never ends. It is checked against the schema by a bounded reader instead: a stream
read event by event with a socket timeout and a deadline, each event's name one the schema's
x-events lists and its JSON data validated (python-jsonschema, draft 2020-12) against that
event's schema: snapshots, the commits of a job shoal-client trains (its own job, `evdigits`,
so the fixture's `digits` stays untrained), and the end a revoked token's stream gets; its 400
and 401 answers against the statuses and body the operation lists.

Run by ctest (openapi.schemathesis), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/openapi_test.py
Needs root (shoald's data plane); skips naming what is missing.
"""

import http.client as httpclient
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import (BUILTIN_FUNCTION, ROOT, StandaloneShoald,  # noqa: E402
                           digits_fljob, fl_client_env, http, shoal_client_argv, skip_reason)

try:
    import jsonschema
except ImportError:  # requirements/test.lock has it; skips only the event stream's test
    jsonschema = None

SCHEMA = os.path.join(ROOT, "api", "openapi.json")
ONNX = os.path.join(ROOT, "tests", "data", "inference", "mlp.onnx")
SCHEMATHESIS = os.path.join(os.path.dirname(sys.executable), "schemathesis")
# Cases per operation and phase: ~45 operations in two runs stay well under 2 minutes on 2 cores.
MAX_EXAMPLES = 12
SEED = 20261129

MODEL_FUNCTION = f"""apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: mlp-fn}}
spec:
  handler: inference
  concurrency: 8
  scale: {{min: 1, max: 1}}
  inference:
    modelName: mlp
    source: {{onnx: {ONNX}}}
    device: cpu
    threads: 1
    maxBatchSize: 4
    maxQueueDelay: 1ms
"""

_skip = skip_reason(["shoald", "shoal", "shoal-fn", "shoal-client"])
if _skip is None and not os.access(SCHEMATHESIS, os.X_OK):
    _skip = f"{SCHEMATHESIS} is missing (requirements/test.lock: schemathesis)"
pytestmark = pytest.mark.skipif(_skip is not None, reason=str(_skip))


@pytest.fixture(scope="module")
def node():
    tmp = tempfile.mkdtemp(prefix="shoal-openapi-")
    with StandaloneShoald(tmp, f"oapi{os.getpid()}") as n:
        n.deploy(BUILTIN_FUNCTION.format(name="echo", builtin="echo",
                                         spec="  scale: {min: 1, max: 1}"))
        n.deploy(digits_fljob("fedavg", 16, 2, 3, 5, 4, 1))
        n.deploy(MODEL_FUNCTION)
        n.wait_ready("echo")
        n.wait_ready("mlp-fn")
        n.tmp = tmp
        yield n


def schemathesis(node, url, report, filters):
    """One schemathesis run against `url` over the operations `filters` (its --include-* and
    --exclude-* options) select: (exit code, output)."""
    argv = [SCHEMATHESIS, "run", SCHEMA, "--url", url, "-H", f"Authorization: Bearer {node.token}",
            "--phases", "examples,coverage,fuzzing", "--max-examples", str(MAX_EXAMPLES),
            "--seed", str(SEED), "--workers", "1", "--generation-database", "none",
            "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
            "response_schema_conformance,response_headers_conformance",
            "--exclude-tag", "stream", "--request-timeout", "20", "--no-color",
            "--report", "junit", "--report-junit-path", report]
    argv += filters
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=node.tmp,
                       env={"PATH": "/usr/bin:/bin", "HOME": node.tmp, "NO_COLOR": "1"})
    return r.returncode, r.stdout + r.stderr


def test_served_document_is_the_file(node):
    code, body = http(f"{node.api_url}/v1/openapi.json")
    assert code == 200, body
    with open(SCHEMA) as f:
        assert body == f.read()
    doc = json.loads(body)
    assert doc["openapi"] == "3.1.0"
    for path in ("/v1/functions", "/v1/jobs/{job}/join", "/v1/jobs/{job}/updates", "/fn/{name}",
                 "/v2/models/{model}/infer", "/v2/models/{model}/ready", "/v1/openapi.json"):
        assert path in doc["paths"], path
    # The public listener serves no other /v1 path than the fleet's.
    code, _ = http(f"{node.gw}/v1/openapi.json")
    assert code == 404


PUBLIC = "^(fleet|fleet-public|invoke|inference|health)$"


def test_public_listener_conforms(node):
    code, out = schemathesis(node, node.gw, os.path.join(node.tmp, "public.xml"),
                             ["--include-tag-regex", PUBLIC])
    assert code == 0, out[-20000:]


def test_control_listener_conforms(node):
    # Deletes last (below): they would take the resources the other operations' cases name.
    code, out = schemathesis(node, node.api_url, os.path.join(node.tmp, "control.xml"),
                             ["--include-tag", "control", "--exclude-method", "DELETE"])
    assert code == 0, out[-20000:]


class EventStream:
    """One GET /v1/events, read event by event: every read bounded by the socket timeout."""

    def __init__(self, node, query, token, timeout=15):
        self.conn = httpclient.HTTPConnection("127.0.0.1", node.control_port, timeout=timeout)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.conn.request("GET", "/v1/events" + query, headers=headers)
        self.resp = self.conn.getresponse()

    def next(self):
        """(event name, data) of the next event, None at the end of the stream; raises
        socket.timeout when the server sends nothing for `timeout` seconds."""
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
            else:
                assert field in ("retry", "id", ""), f"not an SSE field: {line!r}"

    def close(self):
        self.conn.close()


def _validator(doc, ref):
    """A draft 2020-12 validator of the schema at `ref` (a "#/components/..." pointer), $refs
    resolved in the OpenAPI document (3.1's schemas are JSON Schema 2020-12)."""
    return jsonschema.Draft202012Validator({**doc, "$ref": ref})


@pytest.mark.skipif(jsonschema is None, reason="python-jsonschema is missing (test.lock)")
def test_event_stream_conforms(node):
    with open(SCHEMA) as f:
        doc = json.load(f)
    op = doc["paths"]["/v1/events"]["get"]
    media = op["responses"]["200"]["content"]
    assert list(media) == ["text/event-stream"]
    events = {name: _validator(doc, s["$ref"])
              for name, s in media["text/event-stream"]["x-events"].items()}
    assert sorted(events) == ["commit", "end", "snapshot"]

    def check(name, data):
        assert name in events, f"event {name!r} is not in the schema's x-events"
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in events[name].iter_errors(json.loads(data))]
        assert not errors, (name, errors, data[:2000])

    # The validators are not vacuous: a snapshot without its node, a commit without its version.
    assert not events["snapshot"].is_valid({"functions": [], "jobs": []})
    assert not events["commit"].is_valid({"job": "j"})

    # Errors: the statuses and body the operation lists.
    error_body = _validator(doc, "#/components/schemas/Error")
    for query, token, status in (("?interval=0.1", node.token, 400), ("", None, 401)):
        s = EventStream(node, query, token)
        assert s.resp.status == status and str(status) in op["responses"]
        assert s.resp.getheader("Content-Type").startswith("application/json")
        error_body.validate(json.loads(s.resp.read()))
        s.close()

    # Snapshots, then the commits of a job that trains, all within the deadline.
    node.deploy(digits_fljob("fedavg", 16, 2, 3, 2, 2, 1).replace("name: digits",
                                                                 "name: evdigits"))
    fl_token = node.api("/v1/tokens", json.dumps({"role": "fl-client",
                                                  "job": "evdigits"}).encode())["token"]
    s = EventStream(node, "?interval=0.5", node.token)
    assert s.resp.status == 200
    assert s.resp.getheader("Content-Type").startswith("text/event-stream")
    argv = shoal_client_argv(node.gw, clients=2, time_scale="0", max_seconds=40,
                             train_threads=1)
    argv[argv.index("--job") + 1] = "evdigits"
    trainer = subprocess.Popen(argv, env=fl_client_env(fl_token), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    seen = {"snapshot": 0, "commit": 0}
    try:
        deadline = time.monotonic() + 60
        while (seen["snapshot"] < 3 or seen["commit"] < 2) and time.monotonic() < deadline:
            e = s.next()
            assert e is not None, "the stream ended"
            check(*e)
            seen[e[0]] += 1
            if e[0] == "commit":
                assert json.loads(e[1])["job"] == "evdigits"
    finally:
        s.close()
        trainer.wait(timeout=60)
    assert seen["snapshot"] >= 3 and seen["commit"] >= 2, seen

    # A revoked token's stream ends with an end event.
    viewer = node.api("/v1/tokens", json.dumps({"role": "viewer",
                                                "name": "oapi-viewer"}).encode())
    s = EventStream(node, "?interval=0.5", viewer["token"])
    assert s.resp.status == 200
    first = s.next()
    check(*first)
    assert first[0] == "snapshot"
    code, _ = node.api.request(f"/v1/tokens/{viewer['id']}", method="DELETE")
    assert code == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        e = s.next()
        assert e is not None, "the stream closed without an end event"
        check(*e)
        if e[0] == "end":
            break
    assert e[0] == "end" and "no longer valid" in json.loads(e[1])["reason"]
    assert s.next() is None
    s.close()


def test_control_listener_deletes_conform(node):
    code, out = schemathesis(node, node.api_url, os.path.join(node.tmp, "deletes.xml"),
                             ["--include-method", "DELETE", "--exclude-tag-regex", PUBLIC])
    assert code == 0, out[-20000:]
