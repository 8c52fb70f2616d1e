"""An unchanged Flower app (tests/fl/flower/app: a quickstart-style PyTorch CNN on Fashion-MNIST)
run by real `flower-supernode` processes (flwr 1.42, REST transport) against a real shoald that
serves Flower's Fleet API and plays the ServerApp from the FLJob's spec.flower:

- the job trains to its target accuracy (the evaluate messages' metrics in the job status);
- Shoal's model after round 1 equals the num-examples-weighted FedAvg of the replies' arrays (the
  ClientApp writes each reply as it sends it), and equals the round-1 model of the same app, same
  seeds and same initial model on Flower's own SuperLink + ServerApp (flwr's FedAvg);
- a SuperNode killed mid-round and a new one started in its place: every round still commits
  with one update per node, none lost.

Skips naming what is missing (root, shoald, flwr or torch in the venv, the data set).
"""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from shoal_testlib import ROOT, StandaloneShoald, free_port, skip_reason  # noqa: E402

np = pytest.importorskip("numpy")
pytest.importorskip("torch", reason="torch is not installed in the venv")
pytest.importorskip("flwr", reason="flwr 1.42 is not installed in the venv (requirements/test.in)")

APP = os.path.join(ROOT, "tests", "fl", "flower", "app")
DATA = "/usr/share/datasets/fashion-mnist"
VENV_BIN = os.path.dirname(sys.executable)
NODES = 4
ROUNDS = 3
TARGET = 0.6

_why = skip_reason(["shoald", "shoal-fn", "shoal"])
if _why is None and not os.path.isdir(DATA):
    _why = f"{DATA} is missing (Debian dataset-fashion-mnist)"
if _why is None and not os.access(os.path.join(VENV_BIN, "flower-supernode"), os.X_OK):
    _why = f"{VENV_BIN}/flower-supernode is missing"
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")


def flwr_env(home):
    os.makedirs(home, exist_ok=True)
    return dict(os.environ, FLWR_HOME=home, FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
                PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"))


def build_fab(tmp):
    out = os.path.join(tmp, "fab")
    os.makedirs(out, exist_ok=True)
    r = subprocess.run([os.path.join(VENV_BIN, "flwr"), "build", "--app", APP], cwd=out,
                       env=flwr_env(os.path.join(tmp, "flwr-build")), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    fabs = [f for f in os.listdir(out) if f.endswith(".fab")]
    assert len(fabs) == 1, fabs
    return os.path.join(out, fabs[0])


class SuperNode:
    """One flower-supernode (its own FLWR_HOME, Runtime API port and process group)."""

    def __init__(self, tmp, superlink, pid, tag):
        self.log_path = os.path.join(tmp, f"supernode-{tag}.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [os.path.join(VENV_BIN, "flower-supernode"), "--insecure", "--superlink", superlink,
             "--node-config", f"partition-id={pid} num-partitions={NODES}",
             "--port", str(free_port())],
            env=flwr_env(os.path.join(tmp, f"home-{tag}")), stdout=self.log,
            stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        self.log.close()

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


def read_safetensors(data):
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], np.float32).reshape(t["shape"])
    return out


def model(d, job, version):
    import urllib.request

    req = urllib.request.Request(f"{d.api_url}/v1/jobs/{job}/model?version={version}",
                                 headers={"Authorization": f"Bearer {d.token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return read_safetensors(r.read())


def fljob(name, fab, dump, rounds=ROUNDS, extra=""):
    return f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata: {{name: {name}}}
spec:
  algorithm: {{name: fedavg}}
  model: {{architecture: cnn, hidden: 32, seed: 1}}
  clients: {{expected: {NODES}}}
  stop: {{rounds: {rounds}}}
  training: {{learningRate: 0.1}}
  aggregation: {{maxFanIn: 4, maxLeaves: 1}}
  flower:
    fab: {fab}
    runConfig: {{dump-dir: "{dump}", num-server-rounds: {rounds}, train-samples: 1024}}
    trainConfig: {{lr: 0.1}}
{extra}"""


def wait_status(d, job, pred, timeout, nodes):
    deadline = time.time() + timeout
    st = {}
    while time.time() < deadline:
        st = d.api(f"/v1/jobs/{job}")
        if pred(st):
            return st
        for n in nodes:
            assert n.proc.poll() is None or n.killed, n.text()[-3000:]
        time.sleep(0.5)
    logs = "\n".join(n.text()[-1500:] for n in nodes)
    raise AssertionError(f"job {job}: {json.dumps(st)[:2000]}\n{d.d.log()[-4000:]}\n{logs}")


@pytest.fixture(scope="module")
def shoal_run(tmp_path_factory):
    """The app on Shoal: 4 SuperNodes, 3 rounds; what the checks need."""
    tmp = str(tmp_path_factory.mktemp("flower"))
    fab = build_fab(tmp)
    dump = os.path.join(tmp, "dump-shoal")
    os.makedirs(dump)
    with StandaloneShoald(tmp, "fl1") as d:
        d.deploy(fljob("fmnist", fab, dump))
        nodes = [SuperNode(tmp, f"127.0.0.1:{d.port}", k, f"s{k}") for k in range(NODES)]
        for n in nodes:
            n.killed = False
        try:
            st = wait_status(d, "fmnist", lambda s: s["state"] == "done" and all(
                v.get("accuracy") is not None for v in s.get("versions", [])
                if v["version"] >= 1), 900, nodes)
            models = {v: model(d, "fmnist", v) for v in (0, 1)}
        finally:
            for n in nodes:
                n.stop()
    return {"tmp": tmp, "fab": fab, "dump": dump, "status": st, "models": models}


def test_trains_to_target_accuracy(shoal_run):
    st = shoal_run["status"]
    assert st["version"] == ROUNDS
    versions = {v["version"]: v for v in st["versions"]}
    for r in range(1, ROUNDS + 1):
        assert versions[r]["updates"] == NODES, versions[r]
    assert st["best_accuracy"] >= TARGET, st
    assert versions[ROUNDS]["accuracy"] >= TARGET, versions


def test_round_one_is_fedavg_of_the_replies(shoal_run):
    replies = [np.load(os.path.join(shoal_run["dump"], f"reply-r1-p{k}.npz"))
               for k in range(NODES)]
    weights = np.array([float(r["num_examples"]) for r in replies])
    got = shoal_run["models"][1]
    assert set(got) == {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                        "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    for name, value in got.items():
        want = sum(w * r[name].astype(np.float64) for w, r in zip(weights, replies)) / weights.sum()
        np.testing.assert_allclose(value, want, rtol=0, atol=2e-6, err_msg=name)
        # The update changed the model: not the initial one.
        assert not np.array_equal(value, shoal_run["models"][0][name]) or name.endswith("bias")


def test_same_app_on_flowers_superlink_gives_the_same_round_one(shoal_run):
    tmp = shoal_run["tmp"]
    init = os.path.join(tmp, "init.npz")
    np.savez(init, **shoal_run["models"][0])
    dump = os.path.join(tmp, "dump-flower")
    os.makedirs(dump)
    port = free_port()
    home = os.path.join(tmp, "flwr-superlink")
    env = flwr_env(home)
    with open(os.path.join(home, "config.toml"), "w") as f:
        f.write(f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                f'address = "127.0.0.1:{port}"\ninsecure = true\n')
    log = open(os.path.join(tmp, "superlink.log"), "wb")
    link = subprocess.Popen([os.path.join(VENV_BIN, "flower-superlink"), "--insecure", "--host",
                             "127.0.0.1", "--port", str(port)], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True)
    nodes = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        nodes = [SuperNode(tmp, f"127.0.0.1:{port}", k, f"f{k}") for k in range(NODES)]
        cfg = f'dump-dir="{dump}" init-npz="{init}" num-server-rounds=1 train-samples=1024'
        r = subprocess.run([os.path.join(VENV_BIN, "flwr"), "run", APP, "local",
                            "--run-config", cfg], env=env, cwd=tmp, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        path = os.path.join(dump, "flower-global-1.npz")
        deadline = time.time() + 600
        while time.time() < deadline and not os.path.exists(path):
            time.sleep(0.5)
        time.sleep(1)
        assert os.path.exists(path), open(os.path.join(tmp, "superlink.log")).read()[-4000:]
        flower = np.load(path)
        for name, value in shoal_run["models"][1].items():
            np.testing.assert_allclose(value, flower[name], rtol=0, atol=2e-6, err_msg=name)
    finally:
        for n in nodes:
            n.stop()
        try:
            os.killpg(link.pid, signal.SIGTERM)
            link.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(link.pid, signal.SIGKILL)
        log.close()


def test_a_supernode_killed_mid_round_and_one_that_reconnects(tmp_path):
    """Node 0 is killed (its whole process group) once it received round 1's train message; a
    new SuperNode with the same partition starts in its place (a new node to the job). Every
    round commits with one update per node: the survivors' replies are not lost and the new node
    trains the round the killed one left."""
    tmp = str(tmp_path)
    fab = build_fab(tmp)
    dump = os.path.join(tmp, "dump")
    os.makedirs(dump)
    with StandaloneShoald(tmp, "fl2") as d:
        d.deploy(fljob("resilient", fab, dump, rounds=2))
        nodes = [SuperNode(tmp, f"127.0.0.1:{d.port}", k, f"k{k}") for k in range(NODES)]
        for n in nodes:
            n.killed = False
        try:
            deadline = time.time() + 600
            while "Receiving: train message" not in nodes[0].text():
                assert time.time() < deadline, nodes[0].text()[-3000:]
                time.sleep(0.2)
            nodes[0].kill()
            nodes[0].killed = True
            nodes.append(SuperNode(tmp, f"127.0.0.1:{d.port}", 0, "k0-again"))
            nodes[-1].killed = False
            st = wait_status(d, "resilient", lambda s: s["state"] == "done", 900, nodes)
        finally:
            for n in nodes:
                if not n.killed:
                    n.stop()
        versions = {v["version"]: v for v in st["versions"]}
        assert st["version"] == 2
        assert versions[1]["updates"] == NODES and versions[2]["updates"] == NODES, versions
        assert st["clients"]["joined"] == NODES + 1  # the new node joined; the killed one stays
        # The killed node's reply never came; the new node's did, for round 1 and round 2.
        assert "Sent successfully" not in nodes[0].text()
        assert nodes[-1].text().count("Sent successfully") >= 2, nodes[-1].text()[-3000:]
