"""The model zoo of issue 33 over /v2: one shoald serves the six exported models
(tests/serving/zoo/export_zoo.py: ResNet-50, MobileNetV3-small, EfficientNet-B0, ViT-B/16, the
BERT-base-shaped classifier and the GPT-2-small-shaped decoder) as six inference functions from
their ONNX files; tritonclient.http sends each its fixed input (batch 2, binary tensors) and the
outputs equal onnxruntime's within 1e-4 of the output's scale. The model metadata states the
graph's input and output shapes.

Run by ctest (zoo_oip.integration, after serving_zoo_export has exported the models into
build/zoo), or:
  SHOAL_BIN_DIR=build/bin SHOAL_ZOO_DIR=build/zoo .venv/bin/python -m pytest -q \
    tests/integration/zoo_oip_test.py
Needs root (shoald's data plane) and tritonclient[http]; skips naming what is missing.
"""

import json
import os
import sys
import tempfile

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import ROOT, StandaloneShoald, skip_reason  # noqa: E402

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")

ZOO = os.environ.get("SHOAL_ZOO_DIR", os.path.join(ROOT, "build", "zoo"))
MODELS = ["resnet50", "mobilenet_v3_small", "efficientnet_b0", "vit_b16", "bert_base",
          "gpt2_small"]
REL_TOLERANCE = 1e-4

pytestmark = pytest.mark.skipif(skip_reason(["shoald", "shoal", "shoal-fn"]) is not None,
                                reason=str(skip_reason(["shoald", "shoal", "shoal-fn"])))


def dns(model):
    return model.replace("_", "-")


def manifest(model):
    return f"""apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: {dns(model)}-fn}}
spec:
  handler: inference
  concurrency: 4
  scale: {{min: 1, max: 1}}
  inference:
    modelName: {dns(model)}
    source: {{onnx: {os.path.join(ZOO, model + '.onnx')}}}
    device: cpu
    threads: 1
    maxBatchSize: 2
    maxQueueDelay: 1ms
"""


def load(model):
    with open(os.path.join(ZOO, model + ".json")) as f:
        shapes = json.load(f)
    x = np.fromfile(os.path.join(ZOO, model + ".input.bin"), "<f4").reshape(shapes["input"])
    y = np.fromfile(os.path.join(ZOO, model + ".ref.bin"), "<f4").reshape(shapes["output"])
    return x, y


@pytest.fixture(scope="module")
def served():
    missing = [m for m in MODELS if not os.path.exists(os.path.join(ZOO, m + ".json"))]
    if missing:
        pytest.skip(f"{ZOO} lacks {missing}: run tests/serving/zoo/export_zoo.py {ZOO}")
    tmp = tempfile.mkdtemp(prefix="shoal-zoo-")
    with StandaloneShoald(tmp, f"zoo{os.getpid()}") as node:
        for m in MODELS:
            node.deploy(manifest(m))
        for m in MODELS:
            node.wait_ready(dns(m) + "-fn", timeout=120)
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{node.port}",
                                                  network_timeout=120)
        try:
            yield client
        finally:
            client.close()


@pytest.mark.parametrize("model", MODELS)
def test_v2_infer_matches_onnxruntime(served, model):
    x, want = load(model)
    meta = served.get_model_metadata(dns(model))
    assert meta["inputs"][0]["shape"] == [-1, *x.shape[1:]]
    assert meta["outputs"][0]["shape"] == [-1, *want.shape[1:]]
    name_in, name_out = meta["inputs"][0]["name"], meta["outputs"][0]["name"]
    i = httpclient.InferInput(name_in, list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=True)
    r = served.infer(dns(model), [i], outputs=[httpclient.InferRequestedOutput(name_out)])
    got = r.as_numpy(name_out)
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"{model}: /v2 max |shoal - onnxruntime| / max |onnxruntime| = {err:.3g}")
    assert err < REL_TOLERANCE
