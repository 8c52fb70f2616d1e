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
(tests/data/inference/mlp.onnx). GET /v1/events (tag stream) is excluded: its answer never ends
(events_test.py covers it).

Run by ctest (openapi.schemathesis), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/openapi_test.py
Needs root (shoald's data plane); skips naming what is missing.
"""

import json
import os
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import (BUILTIN_FUNCTION, ROOT, StandaloneShoald,  # noqa: E402
                           digits_fljob, http, skip_reason)

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

_skip = skip_reason(["shoald", "shoal", "shoal-fn"])
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


def test_control_listener_deletes_conform(node):
    code, out = schemathesis(node, node.api_url, os.path.join(node.tmp, "deletes.xml"),
                             ["--include-method", "DELETE", "--exclude-tag-regex", PUBLIC])
    assert code == 0, out[-20000:]
