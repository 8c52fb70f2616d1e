"""FL of any model, served live (issue 33 item 3): a PyTorch model that is none of the built-in
architectures (a depthwise-separable CNN with LayerNorm, 1x8x8 inputs, 4 classes) is exported
to ONNX and deployed as an FLJob with spec.model.onnx (the job's tensors are the graph's float
initializers, named as the module's state_dict); an inference function with source {flJob: J}
serves that graph with each committed version, hot-swapped. Two SDK clients train it through
shoald on synthetic data while the test queries /v2; every answer's version is fetched from the
job and run by onnxruntime with the same weights: the outputs agree within 1e-4 relative and the
accuracy on the probe set is the same; at least two versions are seen and the job learns. Then
`shoal fl model --format onnx` writes the job's own graph with the final version's tensors,
which onnxruntime runs as it is.

Run by ctest (fl_onnx_serve.integration), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/fl_onnx_serve_test.py
Needs root (shoald's data plane), torch, onnx and onnxruntime; skips naming what is missing.
"""

import json
import os
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import BIN, standalone_shoald  # noqa: E402

torch = pytest.importorskip("torch", reason="torch is not installed")
onnx = pytest.importorskip("onnx", reason="onnx is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
import shoal_fl  # noqa: E402
from onnx import numpy_helper  # noqa: E402

JOB = "onnxfl"
FN = "onnxfl-serve"
ROUNDS = 6
CLASSES = 4


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)  # depthwise
        self.pw = torch.nn.Conv2d(8, 8, 1)  # pointwise
        self.ln = torch.nn.LayerNorm(8 * 8 * 8)
        self.fc = torch.nn.Linear(8 * 8 * 8, CLASSES)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = torch.relu(self.pw(self.dw(x)))
        return self.fc(self.ln(torch.flatten(x, 1)))


def data(n, seed):
    """Four classes of 1x8x8 images: a bright quadrant each, plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, CLASSES, n)
    x = rng.normal(0, 0.5, (n, 1, 8, 8)).astype(np.float32)
    for i, c in enumerate(y):
        r, q = divmod(int(c), 2)
        x[i, 0, r * 4:r * 4 + 4, q * 4:q * 4 + 4] += 1.5
    return x, y


class TorchClient(shoal_fl.Client):
    def __init__(self, seed):
        self.net = Net()
        self.x, self.y = data(256, seed)

    def fit(self, parameters, config):
        names = config["parameter_names"]
        self.net.load_state_dict({n: torch.from_numpy(np.array(p)) for n, p in
                                  zip(names, parameters)})
        opt = torch.optim.SGD(self.net.parameters(), lr=config["learning_rate"])
        rng = np.random.default_rng(config["model_version"])
        for _ in range(config["local_steps"]):
            idx = rng.integers(0, len(self.y), config["batch_size"])
            loss = torch.nn.functional.cross_entropy(self.net(torch.from_numpy(self.x[idx])),
                                                     torch.from_numpy(self.y[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
        sd = self.net.state_dict()
        return [sd[n].detach().numpy().astype(np.float32) for n in names], len(self.y), {}

    def evaluate(self, parameters, config):
        return None


def infer(port, x):
    body = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.reshape(-1).tolist()}]}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{FN}/infer", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        out = json.loads(r.read())
    o = out["outputs"][0]
    return int(out["model_version"]), np.array(o["data"], np.float32).reshape(o["shape"])


def onnxruntime_with(model_proto, weights, x):
    m = onnx.ModelProto()
    m.CopyFrom(model_proto)
    for t in m.graph.initializer:
        if t.name in weights:
            t.CopyFrom(numpy_helper.from_array(np.asarray(weights[t.name], np.float32), t.name))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


@pytest.fixture(scope="module")
def shoald():
    with standalone_shoald("onnxfl") as s:
        yield s


def test_fl_of_an_onnx_model_served_live(shoald):
    torch.manual_seed(0)
    net = Net().eval()
    # Beside the build (the instances' sandboxes see it, not the host's /tmp).
    out = os.path.join(os.path.dirname(os.path.abspath(BIN)), "fl_onnx_serve")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "dwcnn.onnx")
    torch.onnx.export(net, (torch.zeros(1, 1, 8, 8),), path, dynamo=False, opset_version=17,
                      do_constant_folding=False, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    proto = onnx.load(path)
    floats = {t.name for t in proto.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    assert floats == set(net.state_dict().keys())  # the job's tensors are the module's
    os.chmod(path, 0o644)
    deploy = shoald.cli("deploy", "-f", "-", timeout=30, stdin=f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata: {{name: {JOB}}}
spec:
  algorithm: {{name: fedavg}}
  model: {{onnx: {path}}}
  clients: {{expected: 2}}
  stop: {{rounds: {ROUNDS}}}
  training: {{localSteps: 10, learningRate: 0.1, batchSize: 16}}
---
apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: {FN}}}
spec:
  handler: inference
  scale: {{min: 1, max: 1}}
  inference:
    modelName: {FN}
    source: {{flJob: {JOB}}}
    device: cpu
    threads: 1
    maxBatchSize: 64
""")
    assert deploy.returncode == 0, deploy.stderr + deploy.stdout
    token = shoald.api("/v1/tokens", json.dumps({"role": "fl-client", "job": JOB}).encode())["token"]
    server = f"http://127.0.0.1:{shoald.port}"
    shoald.wait_ready(FN, timeout=60)
    jc = shoal_fl.JobClient(server, JOB, token)
    initial = jc.model(0)
    assert sorted(initial.names) == initial.names == sorted(net.state_dict().keys())

    errors = []

    def client(k):
        try:
            shoal_fl.run_client(server, JOB, TorchClient(seed=k), token=token, name=f"c{k}",
                                evaluate=False, evaluate_final=False, max_seconds=120)
        except Exception as e:  # reported by the main thread
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    probe_x, probe_y = data(64, seed=99)
    checked = {}
    deadline = time.time() + 150
    while time.time() < deadline:
        version, got = infer(shoald.port, probe_x)
        if version not in checked:
            want = onnxruntime_with(proto, jc.model(version).state_dict(), probe_x)
            err = float(np.abs(got - want).max() / np.abs(want).max())
            acc = (got.argmax(1) == probe_y).mean(), (want.argmax(1) == probe_y).mean()
            print(f"version {version}: rel error {err:.2e}, accuracy shoal {acc[0]:.3f} "
                  f"onnxruntime {acc[1]:.3f}")
            assert err < 1e-4, (version, err)
            assert acc[0] == acc[1]
            checked[version] = acc[0]
        if version >= ROUNDS and not any(t.is_alive() for t in threads):
            break
        time.sleep(0.2)
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(checked) >= 2, checked
    assert max(checked) == ROUNDS, checked
    assert checked[ROUNDS] > checked[min(checked)], checked  # it learns

    # `shoal fl model --format onnx`: the job's own graph (opset and nodes as exported) with the
    # final version's tensors, which onnxruntime runs as it is.
    exported = os.path.join(out, "final.onnx")
    r = shoald.cli("fl", "model", JOB, "--format", "onnx", "-o", exported, "--version",
                   str(ROUNDS))
    assert r.returncode == 0, r.stderr + r.stdout
    assert f"(version {ROUNDS}, the job's ONNX graph" in r.stdout, r.stdout
    got_proto = onnx.load(exported)
    assert [n.op_type for n in got_proto.graph.node] == [n.op_type for n in proto.graph.node]
    assert got_proto.opset_import[0].version == proto.opset_import[0].version
    final = jc.model(ROUNDS).state_dict()
    for t in got_proto.graph.initializer:
        if t.name in final:
            assert np.array_equal(numpy_helper.to_array(t), np.asarray(final[t.name], np.float32))
    sess = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
    assert np.array_equal(sess.run(None, {"input": probe_x})[0],
                          onnxruntime_with(proto, final, probe_x))
