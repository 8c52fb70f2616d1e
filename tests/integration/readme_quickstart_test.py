"""README.md's quickstart, run as written against the live shoald it starts.

The commands are README.md's own: every ```sh block of its "## Quickstart" section, in order,
read from the file at test time, so a README that drifts from what works fails here. They run in
one bash (set -e), from a folder that has the repository's deploy/, shoal/ and .venv and the
build's bin/ at build/bin (so `export PATH=$PWD/build/bin:$PATH` and the relative paths mean
what they mean in a clone), in a network namespace of their own (unshare --net, loopback up):
shoald takes the README's ports, 8080 and 8081, without meeting anything else on this machine.
The one rewrite: the README's /tmp/ paths (shoald's state dir and logs, the clients' logs) go
to this test's temporary folder; the test checks the README still names them.

Asserted, block by block (a marker line is printed between blocks): shoald wrote admin.conf;
`shoal deploy` reports echo, `shoal invoke` and curl get their bodies back, `shoal get` lists
echo; the FL job is deployed, its four PyTorch clients (shoal/fl/sdk/python/examples/fmnist_torch.py,
the SDK's run_client) train it until `shoal fl watch` ends on a version at >= 80 % test
accuracy; the model is served over OIP (GET /v2/models/fmnist answers its metadata),
shoal-client classifies the test split through it at >= 75 %, and `shoal fl model --format onnx`
writes an ONNX file that onnx loads, with the model's input shape. Stops everything it started.

Needs root (shoald, unshare), torch and Debian's dataset-fashion-mnist; skips naming what is
missing. Run by ctest (readme.quickstart), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/readme_quickstart_test.py
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import BIN, ROOT, skip_reason  # noqa: E402

README = os.path.join(ROOT, "README.md")
DATA = "/usr/share/datasets/fashion-mnist"
MARKER = "=== quickstart block"
# The whole quickstart: the job trains to 80 % (or 100 versions) with four clients on 2 cores.
DEADLINE_S = 540


def _why_skip():
    reason = skip_reason(["shoald", "shoal", "shoal-fn", "shoal-client"])
    if reason:
        return reason
    for tool in ("unshare", "ip", "curl"):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    if not os.path.isdir(DATA):
        return f"{DATA} is missing (Debian dataset-fashion-mnist)"
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed in the venv"
    return None


pytestmark = pytest.mark.skipif(_why_skip() is not None, reason=str(_why_skip()))


def quickstart_blocks(text):
    """The ```sh blocks of README's "## Quickstart" section, in order."""
    m = re.search(r"^## Quickstart\n(.*?)(?=^## )", text, re.M | re.S)
    assert m, "README.md has no '## Quickstart' section"
    return re.findall(r"^```sh\n(.*?)^```$", m.group(1), re.M | re.S)


def test_quickstart_blocks_are_found():
    with open(README) as f:
        blocks = quickstart_blocks(f.read())
    assert len(blocks) == 4, blocks
    assert blocks[0].startswith("export PATH=$PWD/build/bin:$PATH\nshoald --standalone")
    assert "shoal deploy -f deploy/examples/echo.yaml" in blocks[1]
    assert "shoal/fl/sdk/python/examples/fmnist_torch.py" in blocks[2]
    assert "shoal fl model fmnist --format onnx -o fmnist.onnx" in blocks[3]


def _script(blocks, tmp):
    body = []
    for i, block in enumerate(blocks):
        assert "/tmp/" in block or i > 0, "the README's shoald no longer writes under /tmp/"
        body.append(f"echo '{MARKER} {i}'\n" + block.replace("/tmp/", tmp + "/"))
    # Everything the blocks left running in the background (shoald, the clients) is stopped
    # when the script ends, whichever way it ends.
    return ("set -euo pipefail\n"
            "trap 'kill $(jobs -p) 2>/dev/null || true; wait || true' EXIT\n"
            "ip link set lo up\n"
            "wait_for() { for _ in $(seq 200); do \"$@\" >/dev/null 2>&1 && return 0; "
            "sleep 0.1; done; return 1; }\n"
            + "".join(body[:1])
            # shoald writes admin.conf and opens its ports at start-up: the README's next
            # command needs both (a person types it seconds later).
            + f"wait_for test -s {tmp}/shoal-qs/admin.conf\n"
            "wait_for curl -sf http://127.0.0.1:8080/healthz\n"
            + "".join(body[1:])
            + f"echo '{MARKER} end'\n")


def _split(out):
    parts = re.split(rf"^{MARKER} (\S+)\n", out, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_readme_quickstart_runs_as_written():
    with open(README) as f:
        blocks = quickstart_blocks(f.read())
    tmp = tempfile.mkdtemp(prefix="shoal-quickstart-")
    work = os.path.join(tmp, "clone")
    os.makedirs(os.path.join(work, "build"))
    os.symlink(os.path.abspath(BIN), os.path.join(work, "build", "bin"))
    for name in ("deploy", "shoal"):
        os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
    os.symlink(sys.prefix, os.path.join(work, ".venv"))
    script = _script(blocks, tmp)
    with open(os.path.join(tmp, "quickstart.sh"), "w") as f:
        f.write(script)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": tmp, "LANG": "C.UTF-8"}
    p = subprocess.Popen(["unshare", "--net", "bash", os.path.join(tmp, "quickstart.sh")],
                         cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        time.sleep(5)
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail("the quickstart ran past its deadline:\n" + out[-6000:] + _logs(tmp))
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # anything the script's trap missed
        except ProcessLookupError:
            pass
    assert p.returncode == 0, out[-6000:] + _logs(tmp)
    parts = _split(out)
    assert list(parts) == ["0", "1", "2", "3", "end"], out[-6000:]

    assert os.path.getsize(os.path.join(tmp, "shoal-qs", "admin.conf")) > 0

    # Deploy a function and call it.
    lines = parts["1"].splitlines()
    assert any("echo" in line for line in lines[:2]), parts["1"]
    # invoke and curl print the echoed bodies as they are (no newline of their own).
    assert "hello, shoalhello again" in parts["1"], parts["1"]
    table = [line.split() for line in lines if line.split()[:1] == ["echo"]]
    assert table, parts["1"]

    # The FL job trains to the target: watch's last line is the job done at >= 80 %.
    done = re.findall(r"^fljob/fmnist done: version (\d+), best accuracy ([0-9.]+)",
                      parts["2"], re.M)
    assert done and float(done[-1][1]) >= 0.80, parts["2"][-3000:] + _logs(tmp)

    # The model served over OIP, classified through, downloaded as ONNX.
    serve = parts["3"]
    meta = json.loads(next(line for line in serve.splitlines() if line.startswith("{")))
    assert meta["name"] == "fmnist" and meta["inputs"][0]["datatype"] == "FP32", meta
    final = re.findall(r"^  version (\d+): (\d+) images, accuracy ([0-9.]+)$", serve, re.M)
    assert final and int(final[-1][1]) > 0 and float(final[-1][2]) >= 0.75, serve
    import onnx
    model = onnx.load(os.path.join(work, "fmnist.onnx"))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims[1:] == [784] or dims[1:] == [1, 28, 28], dims
    shutil.rmtree(tmp, ignore_errors=True)


def _logs(tmp):
    out = ""
    for name in ("shoal-qs.log", "client-0.log"):
        path = os.path.join(tmp, name)
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                out += f"\n--- {name} (end)\n" + f.read()[-3000:]
    return out
