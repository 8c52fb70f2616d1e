"""Conformance of Shoal's /v2 with the Open Inference Protocol as a real client speaks it:
NVIDIA's Triton/KServe Python client (tritonclient.http) against a live shoald serving
tests/data/inference/mlp.onnx (784-128-10) as an inference function. Server and model health and
metadata, infer with JSON tensors and with the binary tensor extension (in and out, and the
client's default of binary outputs when it names none), by version, with the client's gzip and
deflate request compression, and the errors the client raises for a wrong shape, a bad
datatype, a batch over the maximum, an unknown model or version, an unsupported
Content-Encoding and the classification extension (class_count): the status and message of its
InferenceServerException. Outputs are compared with numpy computing the same
graph from the ONNX file's own initializers.

Run by ctest (oip_tritonclient.integration), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/oip_tritonclient_test.py
Needs root (shoald's data plane, as the C++ integration tests) and tritonclient[http] and onnx
(requirements/test.in); skips naming what is missing.
"""

import os
import sys
import tempfile

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import ROOT, StandaloneShoald, skip_reason  # noqa: E402

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
onnx = pytest.importorskip("onnx", reason="onnx is not installed")
from onnx import numpy_helper  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

ONNX = os.path.join(ROOT, "tests", "data", "inference", "mlp.onnx")
MODEL = "mlp"
MAX_BATCH = 8

MANIFEST = f"""apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: {MODEL}-fn}}
spec:
  handler: inference
  concurrency: 16
  scale: {{min: 1, max: 1}}
  inference:
    modelName: {MODEL}
    source: {{onnx: {ONNX}}}
    device: cpu
    threads: 1
    maxBatchSize: {MAX_BATCH}
    maxQueueDelay: 1ms
"""

pytestmark = pytest.mark.skipif(skip_reason(["shoald", "shoal", "shoal-fn"]) is not None,
                                reason=str(skip_reason(["shoald", "shoal", "shoal-fn"])))


def reference(x):
    """The MLP (Gemm, Relu, Gemm) in numpy from the ONNX file's initializers."""
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(ONNX).graph.initializer}
    h = np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], 0)
    return h @ w["fc2.weight"].T + w["fc2.bias"]


@pytest.fixture(scope="module")
def served():
    tmp = tempfile.mkdtemp(prefix="shoal-oip-")
    with StandaloneShoald(tmp, f"oip{os.getpid()}") as node:
        node.deploy(MANIFEST)
        node.wait_ready(f"{MODEL}-fn")
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{node.port}")
        try:
            yield client
        finally:
            client.close()


def images(n, seed=7):
    return np.random.default_rng(seed).random((n, 784), dtype=np.float32)


def infer_input(x, binary, datatype="FP32", shape=None):
    i = httpclient.InferInput("input", list(shape or x.shape), datatype)
    i.set_data_from_numpy(x, binary_data=binary)
    return i


def assert_raises(call, status, message):
    with pytest.raises(InferenceServerException) as e:
        call()
    assert e.value.status() == status, e.value
    assert e.value.message() == message


def test_server_live_ready_and_metadata(served):
    assert served.is_server_live()
    assert served.is_server_ready()
    meta = served.get_server_metadata()
    assert meta["name"] == "shoal"
    assert isinstance(meta["version"], str) and meta["version"]
    assert "binary_tensor_data" in meta["extensions"]


def test_model_ready_and_metadata(served):
    assert served.is_model_ready(MODEL)
    assert served.is_model_ready(MODEL, model_version="1")
    assert not served.is_model_ready("nope")
    assert not served.is_model_ready(MODEL, model_version="2")
    meta = served.get_model_metadata(MODEL)
    assert meta == {
        "name": MODEL, "versions": ["1"], "platform": "onnx",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 784]}],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}],
        "parameters": {"max_batch_size": MAX_BATCH},
    }
    assert served.get_model_metadata(MODEL, model_version="1") == meta


@pytest.mark.parametrize("binary_in,binary_out", [(False, False), (True, True), (True, False),
                                                  (False, True)])
def test_infer_matches_numpy(served, binary_in, binary_out):
    x = images(3)
    out = httpclient.InferRequestedOutput("logits", binary_data=binary_out)
    r = served.infer(MODEL, [infer_input(x, binary_in)], outputs=[out], request_id="req-1")
    resp = r.get_response()
    assert resp["model_name"] == MODEL and resp["model_version"] == "1" and resp["id"] == "req-1"
    (o,) = resp["outputs"]
    assert o["name"] == "logits" and o["datatype"] == "FP32" and o["shape"] == [3, 10]
    assert ("parameters" in o and o["parameters"]["binary_data_size"] == 3 * 10 * 4) == binary_out
    y = r.as_numpy("logits")
    assert y.dtype == np.float32 and y.shape == (3, 10)
    np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)


def test_infer_without_outputs_gets_binary_outputs(served):
    # The client then asks for every output in binary (top-level binary_data_output).
    x = images(1, seed=8)
    r = served.infer(MODEL, [infer_input(x, binary=False)])
    assert r.get_response()["outputs"][0]["parameters"] == {"binary_data_size": 40}
    np.testing.assert_allclose(r.as_numpy("logits"), reference(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(served, algorithm):
    # request_compression_algorithm: the body goes with Content-Encoding gzip or deflate (zlib);
    # response_compression_algorithm only asks (Accept-Encoding): an uncompressed answer is valid.
    x = images(4, seed=10)
    for binary in (False, True):
        r = served.infer(MODEL, [infer_input(x, binary)], request_compression_algorithm=algorithm,
                         response_compression_algorithm=algorithm)
        np.testing.assert_allclose(r.as_numpy("logits"), reference(x), rtol=1e-4, atol=1e-5)


def test_unsupported_content_encoding(served):
    x = images(1)
    assert_raises(lambda: served.infer(MODEL, [infer_input(x, True)],
                                       headers={"Content-Encoding": "br"}),
                  "400", "Content-Encoding 'br' is not supported (gzip, deflate or none)")


def test_classification_extension_is_refused(served):
    # Not in /v2's extensions: the raw logits in its place would be a different tensor.
    x = images(1)
    out = httpclient.InferRequestedOutput("logits", class_count=3)
    assert_raises(lambda: served.infer(MODEL, [infer_input(x, False)], outputs=[out]), "400",
                  "output 'logits': classification 3 (Triton's classification extension) is not "
                  "supported: ask for the output itself")


def test_infer_by_version(served):
    x = images(2, seed=9)
    r = served.infer(MODEL, [infer_input(x, binary=True)], model_version="1")
    np.testing.assert_allclose(r.as_numpy("logits"), reference(x), rtol=1e-4, atol=1e-5)
    assert_raises(lambda: served.infer(MODEL, [infer_input(x, binary=True)], model_version="7"),
                  "404", "model 'mlp' version 7 is not loaded (serving version 1)")


@pytest.mark.parametrize("binary", [False, True])
def test_wrong_shape(served, binary):
    x = images(1)[:, :783]
    assert_raises(lambda: served.infer(MODEL, [infer_input(x, binary)]), "400",
                  "input 'input': wrong shape [1,783] (the model takes [-1,784])")


@pytest.mark.parametrize("binary", [False, True])
def test_bad_datatype(served, binary):
    x = (images(1) * 100).astype(np.int32)
    assert_raises(lambda: served.infer(MODEL, [infer_input(x, binary, datatype="INT32")]), "400",
                  "input 'input': wrong datatype INT32 (the model takes FP32)")


def test_batch_over_max(served):
    x = images(MAX_BATCH + 1)
    assert_raises(lambda: served.infer(MODEL, [infer_input(x, binary=True)]), "400",
                  f"input 'input': batch of {MAX_BATCH + 1} is over the max batch size {MAX_BATCH}")


def test_unknown_model(served):
    x = images(1)
    assert_raises(lambda: served.infer("nope", [infer_input(x, binary=False)]), "404",
                  "model 'nope' not found")
    assert_raises(lambda: served.get_model_metadata("nope"), "404", "model 'nope' not found")
