"""shoal-controller --kubernetes end to end, against a real API server (kube_apiserver.py) and a
one-node Shoal cluster on loopback (etcd, shoal-controller, a cluster-mode shoald; the API server
and Shoal share the one etcd under their own prefixes), the controller authenticated by its
ServiceAccount's token under deploy/k8s's RBAC:
  `kubectl apply` an FLJob -> deployed, Running/Ready, two clients train, the status's version
  rises; the API server restarted mid-job -> the operator re-lists and the version goes on
  rising into the status; the job finishes -> Succeeded; while the controller is down an FLJob
  is edited and a bad one added -> after its restart the edit is deployed (generation 2) and the
  bad one is Failed with the manifest parser's message; `kubectl delete` -> the job is gone;
  a Function -> ready/desired 1/1; deleted while the controller is down -> gone after its restart.
Skipped, naming why, where kube-apiserver is not built or root is missing."""

import json
import os
import subprocess
import tempfile
import time

import pytest

from kube_apiserver import ROOT, KubeApiServer, skip_reason as api_skip
from shoal_testlib import (BIN, ControlApi, Proc, admin_token, digits_fljob, fl_client_env,
                           free_port, shoal_client_argv, skip_reason, start_shoald, stop_shoald)

REASON = api_skip() or skip_reason(["shoal-controller", "shoald", "shoal-client"], etcd=True)
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))

CLUSTER = "k8sop"
ROUNDS = 30
FLJOB = digits_fljob("fedavg", hidden=16, clients=2, rounds=ROUNDS, local_steps=2, max_fan_in=2,
                     max_leaves=1)
# Valid for the API server's schema, refused by the manifest parser (quorum > expected).
BAD_QUORUM = """apiVersion: shoal.dev/v1
kind: FLJob
metadata: {name: quorum}
spec:
  clients: {expected: 2, quorum: 5}
"""


def wait_for(what, probe, timeout=60, interval=0.2):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


class Env:
    def __init__(self, tmp):
        self.tmp = tmp
        self.api = KubeApiServer(tmp)
        self.api.install_crds_and_rbac()
        self.token_file = os.path.join(tmp, "sa.token")
        with open(self.token_file, "w") as f:
            f.write(self.api.service_account_token())
        self.ctl = None
        self.start_controller()
        self.node = start_shoald(tmp, f"{CLUSTER}c{os.getpid()}",
                                 ("--etcd", self.api.etcd_url, "--cluster", CLUSTER),
                                 extra_yaml=f"fl_peer_port: {free_port()}\n")
        self.node.wait_log(r"registered at")
        self.gw = f"http://127.0.0.1:{self.node.port}"

    def start_controller(self):
        self.starts = getattr(self, "starts", 0) + 1  # a log per start: wait_log reads it all
        log = os.path.join(self.tmp, f"controller-{self.starts}.log")
        self.ctl = Proc([os.path.join(BIN, "shoal-controller"), "--etcd", self.api.etcd_url,
                         "--cluster", CLUSTER, "--port", "0",
                         "--state-dir", os.path.join(self.tmp, "controller"), "--kubernetes",
                         "--kube-api", self.api.url, "--kube-token-file", self.token_file,
                         "--kube-ca", os.path.join(self.api.certs, "ca.crt"),
                         "--kube-resync", "30", "--kube-status-interval-ms", "300"], log)
        port = int(self.ctl.wait_log(r"shoal-controller ready on http://127\.0\.0\.1:(\d+)")
                   .group(1))
        self.shoal = ControlApi(f"http://127.0.0.1:{port}",
                                admin_token(os.path.join(self.tmp, "controller")))

    def stop_controller(self):
        self.ctl.close()
        self.ctl = None

    def shoal_job(self, name):
        """(HTTP status, the job as shoal-controller's GET /v1/jobs/<name> shows it)."""
        code, body = self.shoal.request(f"/v1/jobs/{name}")
        return code, (json.loads(body) if code == 200 else body)

    def fljob(self, name):
        status, obj = self.api.request(f"/apis/shoal.dev/v1/namespaces/shoal/fljobs/{name}")
        return obj if status == 200 else None

    def status(self, name):
        obj = self.fljob(name)
        return (obj or {}).get("status", {})

    def condition(self, name, type_):
        for c in self.status(name).get("conditions", []):
            if c["type"] == type_:
                return c
        return {}

    def close(self):
        if self.node is not None:
            stop_shoald(self.node)
        if self.ctl is not None:
            self.ctl.close()
        self.api.close()


@pytest.fixture(scope="module")
def env():
    with tempfile.TemporaryDirectory(prefix="shoal-k8sop-") as tmp:
        e = Env(tmp)
        try:
            yield e
        finally:
            e.close()


def test_fljob_trains_survives_an_api_server_restart_and_is_deleted(env):
    api = env.api
    api.kubectl("apply", "--server-side", "-n", "shoal", "-f", "-", stdin=FLJOB)
    running = wait_for("digits Running", lambda: env.status("digits").get("state") == "Running")
    assert running
    assert env.condition("digits", "Ready")["status"] == "True"
    assert env.condition("digits", "Progressing")["reason"] == "Training"
    assert env.status("digits")["observedGeneration"] == 1
    code, job = env.shoal_job("digits")
    assert code == 200 and job["namespace"] == "shoal" and job["generation"] == 1, job

    token = admin_token(os.path.join(env.tmp, "controller"))

    def train(log):
        return subprocess.Popen(
            shoal_client_argv(env.gw, clients=2, time_scale="0", max_seconds=90,
                              train_threads=1),
            env=fl_client_env(token), stdout=open(os.path.join(env.tmp, log), "wb"),
            stderr=subprocess.STDOUT)

    seen = []

    def status_version():
        v = env.status("digits").get("version", 0)
        if not seen or seen[-1] != v:
            seen.append(v)
        return v

    # Clients train until the job has a few versions, then stop: the job waits mid-way.
    trainer = train("client1.log")
    try:
        wait_for("version 2", lambda: env.shoal_job("digits")[1]["version"] >= 2, interval=0.05)
    finally:
        trainer.kill()
        trainer.wait()
    wait_for("version 2 in the status", lambda: status_version() >= 2)
    time.sleep(1)  # a commit in flight lands
    mid = env.shoal_job("digits")[1]
    assert mid["state"] == "running" and mid["version"] < ROUNDS, mid
    wait_for("the status at the job's version", lambda: status_version() == mid["version"])
    # The API server goes away mid-job and comes back: the operator's watch breaks and it
    # re-lists; new clients finish the job and the status follows it to Succeeded.
    api.restart()
    env.ctl.wait_log(r"re-listing(?s:.*)kubernetes: listed 1 fljobs at resourceVersion",
                     timeout=60)
    trainer = train("client2.log")
    try:
        wait_for("Succeeded", lambda: status_version() >= ROUNDS and
                 env.status("digits").get("state") == "Succeeded", timeout=120)
    finally:
        trainer.kill()
        trainer.wait()
    final = env.status("digits")
    assert final["version"] >= ROUNDS > mid["version"], (final, mid)
    assert final["clients"] >= 2 and 0 < final["accuracy"] <= 1, final
    assert seen == sorted(seen) and len(seen) >= 3, seen  # 0, ..., mid, ..., final
    assert env.condition("digits", "Ready")["reason"] == "Succeeded"
    assert env.condition("digits", "Progressing")["status"] == "False"
    row = api.kubectl("get", "fljobs", "-n", "shoal").stdout.splitlines()
    assert row[0].split()[:5] == ["NAME", "STATE", "VERSION", "ACCURACY", "CLIENTS"], row
    assert row[1].split()[:2] == ["digits", "Succeeded"], row

    # Edited (and a bad one added) while the controller is down: reconciled after its restart.
    env.stop_controller()
    api.kubectl("apply", "--server-side", "-n", "shoal", "-f", "-",
                stdin=FLJOB.replace(f"rounds: {ROUNDS}", f"rounds: {ROUNDS + 2}"))
    assert env.fljob("digits")["metadata"]["generation"] == 2
    api.kubectl("apply", "--server-side", "-n", "shoal", "-f", "-", stdin=BAD_QUORUM)
    env.start_controller()
    wait_for("generation 2 observed", lambda: env.status("digits").get("observedGeneration") == 2)
    code, job = env.shoal_job("digits")
    assert code == 200 and job["generation"] == 2, job
    failed = wait_for("quorum Failed", lambda: env.condition("quorum", "Failed"))
    assert failed["status"] == "True" and failed["reason"] == "InvalidManifest", failed
    assert "quorum" in failed["message"], failed
    assert env.status("quorum")["state"] == "Failed"
    assert env.shoal_job("quorum")[0] == 404

    api.kubectl("delete", "fljob", "digits", "-n", "shoal")
    wait_for("digits gone from Shoal", lambda: env.shoal_job("digits")[0] == 404)
    assert env.ctl.wait_log(r"FLJob digits deleted: deleted from the Shoal cluster")


def test_function_ready_over_desired_and_deleted(env):
    api = env.api
    api.kubectl("apply", "--server-side", "-n", "shoal", "-f",
                os.path.join(ROOT, "deploy", "examples", "echo.yaml"))

    def function_status():
        _, obj = api.request("/apis/shoal.dev/v1/namespaces/shoal/functions/echo")
        return obj.get("status", {})

    # desired from its placement (scale.min 1), ready from the node running its instance.
    st = wait_for("echo 1/1 ready", lambda: function_status().get("desired") == 1 and
                  function_status().get("ready") == 1 and function_status(), timeout=60)
    ready = [c for c in st["conditions"] if c["type"] == "Ready"][0]
    assert ready["status"] == "True" and ready["message"] == "1/1 ready", (ready, st)
    row = api.kubectl("get", "functions.shoal.dev", "-n", "shoal").stdout.splitlines()
    assert row[0].split()[:3] == ["NAME", "READY", "DESIRED"], row
    assert row[1].split()[:3] == ["echo", "1", "1"], row
    code, body = env.shoal.request("/v1/functions/echo")
    assert code == 200 and json.loads(body)["namespace"] == "shoal", body
    # Deleted while no controller runs: the restarted one finds it gone and deletes it.
    env.stop_controller()
    api.kubectl("delete", "function.shoal.dev", "echo", "-n", "shoal")
    env.start_controller()
    wait_for("echo gone from Shoal", lambda: env.shoal.request("/v1/functions/echo")[0] == 404)
    assert env.ctl.wait_log(r"Function echo deleted: deleted from the Shoal cluster")
