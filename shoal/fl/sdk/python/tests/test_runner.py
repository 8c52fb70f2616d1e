import json
import urllib.parse

import numpy as np
import pytest

import shoal_fl

from conftest import parse_update, safetensors_bytes

NAMES = ["fc1.weight", "fc1.bias"]


def model_v(v):
    return [np.full((3, 2), float(v), dtype=np.float32), np.full((3,), -float(v), dtype=np.float32)]


class FakeJob:
    """A job that hands out: train v0 (7 steps), wait, train v1 (3 steps: FedCompass gave this
    client fewer), a 409 for that update, train v2 (4 steps), then done at version 2."""

    def __init__(self):
        self.tasks = [{"kind": "train", "model_version": 0, "local_steps": 7,
                       "learning_rate": 0.05, "batch_size": 16},
                      {"kind": "wait", "retry_after_ms": 20},
                      {"kind": "train", "model_version": 1, "local_steps": 3,
                       "learning_rate": 0.05, "batch_size": 16},
                      {"kind": "train", "model_version": 2, "local_steps": 4,
                       "learning_rate": 0.05, "batch_size": 16},
                      {"kind": "done"}]
        self.update_answers = [(202, {}, {}), (409, {}, {"error": "update too stale"}),
                               (202, {}, {})]
        self.updates, self.evals, self.models = [], [], []
        self.final_version = 2

    def __call__(self, req):
        url = urllib.parse.urlsplit(req.path)
        if url.path.endswith("/join"):
            return 200, {}, {"client_id": "c0", "token": "t0"}
        if url.path.endswith("/task"):
            return 200, {}, self.tasks.pop(0)
        if url.path.endswith("/model"):
            q = urllib.parse.parse_qs(url.query)
            v = int(q["version"][0]) if "version" in q else self.final_version
            self.models.append(v)
            return 200, {"X-Shoal-Model-Version": str(v)}, safetensors_bytes(
                list(zip(NAMES, model_v(v))))
        if url.path.endswith("/updates"):
            self.updates.append(parse_update(req.body))
            return self.update_answers.pop(0)
        if url.path.endswith("/eval"):
            self.evals.append(json.loads(req.body))
            return 200, {}, {"ok": True}
        if url.path == "/v1/jobs/j":
            return 200, {}, {"state": "done", "version": self.final_version}
        return 404, {}, {"error": "no route"}


class Recorder(shoal_fl.Client):
    def __init__(self):
        self.fits, self.evals = [], []

    def fit(self, parameters, config):
        self.fits.append(([p.copy() for p in parameters], dict(config)))
        parameters[0] += 1  # the arrays are the client's to change
        return parameters, 50, {}

    def evaluate(self, parameters, config):
        self.evals.append((config["model_version"], parameters[0][0, 0]))
        return 0.5, 20, {"accuracy": 0.1 * (config["model_version"] + 1)}


def test_run_client_loops_task_fit_push_evaluate_until_done(fake_server):
    job = FakeJob()
    srv = fake_server(job)
    client = Recorder()
    s = shoal_fl.run_client(srv.url, "j", client, token="x", name="n0", dtype="f16")
    assert s.done and s.client_id == "c0"
    assert s.tasks == 3 and s.assigned_steps == [7, 3, 4]
    assert (s.updates_accepted, s.updates_stale) == (2, 1)
    # fit got the global model of the task's version and the task's assignment
    assert [c["local_steps"] for _, c in client.fits] == [7, 3, 4]
    assert [c["model_version"] for _, c in client.fits] == [0, 1, 2]
    assert client.fits[1][1]["parameter_names"] == NAMES
    assert client.fits[1][1]["learning_rate"] == 0.05 and client.fits[1][1]["batch_size"] == 16
    for (params, cfg) in client.fits:
        v = cfg["model_version"]
        assert all(np.array_equal(p, q) for p, q in zip(params, model_v(v)))
    # each update carries the base version, the assigned steps, num_examples, f16 tensors of
    # what fit returned (global + 1)
    for (h, tensors), v, steps in zip(job.updates, [0, 1, 2], [7, 3, 4]):
        assert h.get(4, [0]) == [v] and h[6] == [steps] and h[5] == [50]
        assert [t["name"] for t in tensors] == NAMES
        assert tensors[0]["dtype"] == 2
        w = np.frombuffer(tensors[0]["bytes"], dtype="<f2").astype(np.float32)
        assert w.tolist() == [v + 1.0] * 6
    # evaluate saw the untouched global model (fit's in-place change did not leak into it),
    # once per version, and the reports went to the job
    assert client.evals == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert [(e["version"], e["accuracy"], e["loss"], e["samples"]) for e in job.evals] == [
        (0, 0.1, 0.5, 20), (1, 0.2, 0.5, 20), (2, pytest.approx(0.3), 0.5, 20)]
    assert all(e["client_id"] == "c0" and e["token"] == "t0" for e in job.evals)
    # one download per version; the final version was already evaluated: no extra download
    assert job.models == [0, 1, 2] and s.model_downloads == 3


def test_run_client_checks_what_fit_returns(fake_server):
    class WrongOrder(shoal_fl.Client):
        def fit(self, parameters, config):
            return parameters[::-1], 10, {}

    srv = fake_server(FakeJob())
    with pytest.raises(ValueError, match=r"fit\(\) returned shape \[3\] for tensor 'fc1.weight', "
                                         r"the model's is \[3, 2\]"):
        shoal_fl.run_client(srv.url, "j", WrongOrder(), token="x")


def test_run_client_raises_a_refused_update_with_the_reason(fake_server):
    job = FakeJob()
    job.update_answers = [(400, {}, {"error": "tensor 'fc1.weight': 6 non-finite values"})]
    srv = fake_server(job)
    with pytest.raises(shoal_fl.BadRequest, match="HTTP 400: tensor 'fc1.weight': 6 non-finite"):
        shoal_fl.run_client(srv.url, "j", Recorder(), token="x")


def test_evaluate_must_report_accuracy(fake_server):
    class NoAccuracy(Recorder):
        def evaluate(self, parameters, config):
            return 0.3, 10, {"f1": 0.5}

    srv = fake_server(FakeJob())
    with pytest.raises(ValueError, match="'accuracy'"):
        shoal_fl.run_client(srv.url, "j", NoAccuracy(), token="x")


def test_run_client_evaluates_the_final_version_when_done(fake_server):
    job = FakeJob()
    job.final_version = 3  # committed from others' updates after this client's last task
    srv = fake_server(job)
    client = Recorder()
    s = shoal_fl.run_client(srv.url, "j", client, token="x")
    assert s.done and s.last_version == 3
    assert job.models == [0, 1, 2, 3]
    assert [e["version"] for e in job.evals] == [0, 1, 2, 3]
    assert client.evals[-1] == (3, 3.0)
    s = shoal_fl.run_client(fake_server(FakeJob()).url, "j", Recorder(), token="x",
                            evaluate_final=False)
    assert sorted(s.evaluations) == [0, 1, 2]
