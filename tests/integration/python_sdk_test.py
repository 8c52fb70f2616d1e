"""The Python SDK against a live shoald. A FedCompass FLJob on Fashion-MNIST with the job's `cnn`
architecture, three PyTorch clients (shoal/fl/sdk/python/examples/fmnist_torch.py, one process each,
one per wire dtype: f32, bf16, f16) training concurrently until the job is done. Asserts the
job committed its last version, every client's updates were taken and each ran the local steps
its tasks assigned, and the final global model's accuracy on 2,000 test images (scored here,
not by the clients) is above the bound. And a FedAvg job with spec.aggregation.robust median, one
of three example clients attacking (--attack scale:-10): it learns, and that client is the one
suspect. And two of four example clients mounting the colluding "little is enough" attack
from separate processes: they pool their models through a directory and send the same bytes.

Run by ctest (python_sdk.integration), or:
  SHOAL_BIN_DIR=build/bin /usr/bin/python3 -m pytest -q tests/integration/python_sdk_test.py
Needs root (shoald's data plane and sandbox, as the C++ integration tests), python3-torch and
dataset-fashion-mnist; skips naming what is missing.
"""

import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import ROOT, standalone_shoald  # noqa: E402

SDK = os.path.join(ROOT, "shoal", "fl", "sdk", "python")
EXAMPLE = os.path.join(SDK, "examples", "fmnist_torch.py")
DATA = "/usr/share/datasets/fashion-mnist"

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
import shoal_fl  # noqa: E402  (the wheel the set-up installed into the venv)
import shoal_fl.torch  # noqa: E402


def _fljob(job, algorithm, model, clients, rounds, learning_rate, aggregation):
    """The FLJob manifest of these tests: Fashion-MNIST, 20 local steps of batches of 32."""
    return f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata:
  name: {job}
spec:
  algorithm: {algorithm}
  model: {model}
  data: {{dataset: fashion-mnist}}
  clients: {{expected: {clients}}}
  stop: {{rounds: {rounds}}}
  training: {{localSteps: 20, learningRate: {learning_rate}, batchSize: 32}}
  aggregation: {aggregation}
"""


JOB = "pysdk"
ROUNDS = 12
HIDDEN = 32
CLIENTS = [("f32", 0), ("bf16", 1), ("f16", 2)]
# Measured on 2 cores (2,000 test images, 3 x 1,500 training images, 12 versions), three runs:
# 0.717, 0.738, 0.747 final accuracy in 24-35 s of training; the initial model about 0.10.
ACCURACY_BOUND = 0.62

MANIFEST = _fljob(JOB, "{name: fedcompass, params: {q_min: 5, lambda: 1.5}}",
                  f"{{architecture: cnn, hidden: {HIDDEN}, seed: 1}}", len(CLIENTS), ROUNDS, 0.05,
                  "{maxFanIn: 4, maxLeaves: 1}")


def _no_data():
    if not os.path.exists(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")):
        return f"fashion-mnist not found at {DATA}: install dataset-fashion-mnist"
    return None


@pytest.fixture
def shoald():
    with standalone_shoald("py",
                            also_skip_if=_no_data()) as s:
        yield s


def _deploy(shoald, manifest, job):
    """Deploys `manifest` (the FLJob `job`) and mints an fl-client token of it: the server's URL
    and the token."""
    deploy = shoald.cli("deploy", "-f", "-", stdin=manifest, timeout=30)
    assert deploy.returncode == 0, deploy.stderr + deploy.stdout
    token = shoald.api("/v1/tokens", json.dumps({"role": "fl-client", "job": job}).encode())["token"]
    return f"http://127.0.0.1:{shoald.port}", token


def _example_client(server, job, token, k, clients, train_samples, extra, max_seconds=120):
    """Example client k of `clients` (seed 7) on `job`, its own process; `extra` flags added."""
    cmd = [sys.executable, EXAMPLE, "--server", server, "--job", job, "--client-index", str(k),
           "--num-clients", str(clients), "--train-samples", str(train_samples), "--seed", "7",
           "--max-seconds", str(max_seconds)] + extra
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, SHOAL_TOKEN=token))


def _accuracy(model, images):
    """`model`'s accuracy on the first `images` of the last 2,000 test images (none of the
    clients trained on them), scored here."""
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    import fmnist_torch
    test_x, test_y = fmnist_torch.load_split(DATA, "test")
    test_x, test_y = test_x[-2000:][:images], test_y[-2000:][:images]
    net = fmnist_torch.build_model(model.names, [a.shape for a in model.arrays])
    shoal_fl.torch.set_parameters(net, model.arrays)
    with torch.no_grad():
        return (net(test_x).argmax(1) == test_y).float().mean().item()


def test_three_torch_clients_train_a_fedcompass_job_to_accuracy(shoald):
    t0 = time.time()
    server, token = _deploy(shoald, MANIFEST, JOB)
    initial = shoal_fl.JobClient(server, JOB, token).model(0)

    # One evaluator is enough (--no-evaluate on the others): the test scores the model.
    procs = [_example_client(server, JOB, token, k, len(CLIENTS), 1500,
                             ["--eval-samples", "300", "--dtype", dtype] +
                             ([] if k == 0 else ["--no-evaluate"]), max_seconds=150)
             for dtype, k in CLIENTS]
    summaries = []
    for (dtype, k), p in zip(CLIENTS, procs):
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, f"client {k} ({dtype}) exit {p.returncode}:\n{err}\n{out}"
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    train_s = time.time() - t0

    status = shoald.api(f"/v1/jobs/{JOB}")
    assert status["state"] == "done"
    assert status["version"] == ROUNDS
    assert status["updates_total"] >= ROUNDS
    taken = sum(s["updates_accepted"] for s in summaries)
    assert taken == status["updates_total"]
    for (dtype, k), s in zip(CLIENTS, summaries):
        assert s["done"], f"client {k}: the job never said done"
        assert s["updates_accepted"] >= 1, f"client {k} ({dtype}): no update taken: {s}"
        assert all(q >= 5 for q in s["assigned_steps"]), s["assigned_steps"]  # >= q_min
    # FedCompass: each client's latest update taken carries the steps its task assigned (its
    # last task's update may have been refused as stale when the job ended).
    by_id = {c["id"]: c for c in status["compass"]["clients"]}
    for s in summaries:
        assert len(s["accepted_steps"]) == s["updates_accepted"]
        assert all(q in s["assigned_steps"] for q in s["accepted_steps"]), s
        assert by_id[s["client_id"]]["last_update_steps"] == s["accepted_steps"][-1]
    # The evaluator reported each version it trained from, and the final one.
    assert str(ROUNDS) in summaries[0]["evaluations"]
    reported = {v["version"]: v["accuracy"] for v in status["versions"]}
    assert reported[ROUNDS] == pytest.approx(summaries[0]["evaluations"][str(ROUNDS)][1])

    # The final global model, scored here on 2,000 test images none of the clients trained on.
    final = shoal_fl.JobClient(server, JOB, token).model()
    assert final.version == ROUNDS
    assert final.names == ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                           "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    acc0, acc = _accuracy(initial, 500), _accuracy(final, 2000)
    print(f"\npython sdk: {len(CLIENTS)} torch clients, version {final.version} from "
          f"{status['updates_total']} updates in {train_s:.1f}s; test accuracy {acc:.4f} "
          f"(initial {acc0:.4f}); steps assigned {[s['assigned_steps'] for s in summaries]}")
    assert acc >= ACCURACY_BOUND
    assert acc0 < 0.3


ROBUST_JOB = "pyrobust"
# Three runs: 0.7625 each (deterministic seeds); chance is 0.10.
ROBUST_ACCURACY_BOUND = 0.6
ROBUST_ROUNDS = 8
ROBUST_MANIFEST = _fljob(ROBUST_JOB, "{name: fedavg}", "{architecture: logreg, seed: 1}", 3,
                         ROBUST_ROUNDS, 0.1, "{maxFanIn: 4, maxLeaves: 1, robust: {rule: median}}")


def test_an_attacking_torch_client_is_the_median_rules_suspect(shoald):
    """Three example clients of a FedAvg job with spec.aggregation.robust median; client 2
    poisons every update (--attack scale:-10). The job still learns, and torch-2 is the one
    suspect (status and shoal fl status)."""
    server, token = _deploy(shoald, ROBUST_MANIFEST, ROBUST_JOB)
    procs = [_example_client(server, ROBUST_JOB, token, k, 3, 1500,
                             ["--no-evaluate"] + (["--attack", "scale:-10"] if k == 2 else []))
             for k in range(3)]
    for k, p in enumerate(procs):
        out, err = p.communicate(timeout=150)
        assert p.returncode == 0, f"client {k} exit {p.returncode}:\n{err}\n{out}"
        if k == 2:
            assert "client 2 attacks: scale:-10" in err, err
    status = shoald.api(f"/v1/jobs/{ROBUST_JOB}")
    assert status["state"] == "done" and status["version"] == ROBUST_ROUNDS
    robust = status["robust"]
    assert robust["rule"] == "median"
    assert [s["name"] for s in robust["suspects"]] == ["torch-2"], robust
    assert robust["suspects"][0]["suspect_updates"] == ROBUST_ROUNDS, robust
    assert len(robust["last_commit"]["updates"]) == 3
    cli = shoald.cli("fl", "status", ROBUST_JOB, timeout=30)
    assert cli.returncode == 0, cli.stderr
    assert "Robust:        median" in cli.stdout and "torch-2" in cli.stdout, cli.stdout

    final = shoal_fl.JobClient(server, ROBUST_JOB, token).model()
    acc = _accuracy(final, 2000)
    print(f"\npython sdk, median rule, torch-2 attacking (scale:-10): version {final.version}, "
          f"test accuracy {acc:.4f}")
    assert acc >= ROBUST_ACCURACY_BOUND


LIE_JOB = "pylie"
LIE_ROUNDS = 4
LIE_MANIFEST = _fljob(LIE_JOB, "{name: fedavg}", "{architecture: logreg, seed: 1}", 4, LIE_ROUNDS,
                      0.1, "{maxFanIn: 4, maxLeaves: 1, robust: {rule: median}}")


def test_lie_attackers_in_separate_processes_collude_through_a_directory(shoald, tmp_path):
    """Four example clients of a FedAvg job with the median rule; torch-2 and torch-3 mount the
    colluding "little is enough" attack (--attack lie --attackers 2 --collude-dir): each
    trains honestly, they pool their models per round in the directory, and both send the same
    mean - z std, z = z_max(4, 2) = Phi^-1(3/4) = 0.6745."""
    server, token = _deploy(shoald, LIE_MANIFEST, LIE_JOB)
    lie = ["--attack", "lie", "--attackers", "2", "--collude-dir", str(tmp_path)]
    procs = [_example_client(server, LIE_JOB, token, k, 4, 1000,
                             ["--no-evaluate"] + (lie if k >= 2 else []))
             for k in range(4)]
    summaries = []
    for k, p in enumerate(procs):
        out, err = p.communicate(timeout=150)
        assert p.returncode == 0, f"client {k} exit {p.returncode}:\n{err}\n{out}"
        if k >= 2:
            assert f"client {k} attacks: lie:0.67449" in err, err
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    status = shoald.api(f"/v1/jobs/{LIE_JOB}")
    assert status["state"] == "done" and status["version"] == LIE_ROUNDS
    assert "lie" not in summaries[0] and "lie" not in summaries[1]
    two, three = summaries[2]["lie"], summaries[3]["lie"]
    # Every round both attackers met, and sent the same parameters, byte for byte.
    assert two["colluded"] == three["colluded"] == LIE_ROUNDS, (two, three)
    assert two["alone"] == three["alone"] == 0
    assert sorted(two["sent"]) == [str(v) for v in range(LIE_ROUNDS)]
    assert two["sent"] == three["sent"]
    assert len(set(two["sent"].values())) == LIE_ROUNDS

    final = shoal_fl.JobClient(server, LIE_JOB, token).model()
    acc = _accuracy(final, 2000)
    suspects = [(s["name"], s["suspect_updates"]) for s in status["robust"]["suspects"]]
    print(f"\npython sdk, median rule, torch-2 and torch-3 colluding (lie, z 0.6745): version "
          f"{final.version}, test accuracy {acc:.4f}, suspects {suspects}")
    # What the attack is for: inside the honest spread, the median never flags them (here it
    # flags the honest clients instead: torch-1 4 and torch-0 3 of their 4 updates).
    assert not [s for s in suspects if s[0] in ("torch-2", "torch-3")], suspects
