"""bench-serve's peer: KServe's own Python model server (kserve.ModelServer, FastAPI on uvicorn
with uvloop and httptools) serving an ONNX file through onnxruntime over the Open Inference
Protocol v2 REST routes (JSON tensors and the binary-data extension, which kserve decodes
itself: dataplane.decode_inference_request / InferResponse.to_rest).

Its best settings for a CPU-bound model on this machine, each chosen by bench-serve's runs:
--workers uvicorn worker processes (bench-serve passes the core count), one onnxruntime
intra-op thread per worker (workers x threads = cores), gRPC off, the per-request latency log
line off. The Python server has no batcher of its own (KServe's batcher is the Go agent sidecar
that the InferenceService controller injects on Kubernetes), so requests run one by one.

  python bench/serve_kserve.py --onnx tests/data/inference/mlp.onnx --model_name mlp \
      --http_port 8085 --workers 2
bench-serve waits until GET /v2/models/<name>/ready answers 200 on every worker it reaches.
"""

import argparse
import json
import os
import tempfile

import numpy as np
import onnxruntime as ort

import kserve
from kserve import InferOutput, InferRequest, InferResponse
from kserve.logging import KSERVE_LOG_CONFIG
from kserve.protocol.rest.multiprocess import server as multiprocess_server
from kserve.utils.utils import generate_uuid


class OnnxModel(kserve.Model):
    """One ONNX graph with one input and one output (the bench's MLP or ResNet-18)."""

    def __init__(self, name, path, threads):
        super().__init__(name)
        self.path, self.threads = path, threads
        self.session = None
        self.load()

    def load(self):
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(self.path, so, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name
        self.ready = True
        return True

    # kserve's multi-worker server spawns its workers and pickles the data plane, models
    # included, into each: an onnxruntime session cannot be pickled, so each worker opens its own.
    def __getstate__(self):
        state = self.__dict__.copy()
        state["session"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.load()

    def get_input_types(self):
        i = self.session.get_inputs()[0]
        return [{"name": i.name, "datatype": "FP32",
                 "shape": [d if isinstance(d, int) else -1 for d in i.shape]}]

    def get_output_types(self):
        o = self.session.get_outputs()[0]
        return [{"name": o.name, "datatype": "FP32",
                 "shape": [d if isinstance(d, int) else -1 for d in o.shape]}]

    def predict(self, payload: InferRequest, headers=None, response_headers=None):
        x = payload.inputs[0].as_numpy()
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        y = self.session.run([self.output_name], {self.input_name: x})[0]
        out = InferOutput(name=self.output_name, shape=list(y.shape), datatype="FP32", data=y)
        return InferResponse(model_name=self.name, infer_outputs=[out],
                             response_id=payload.id or generate_uuid(),
                             use_binary_outputs=payload.use_binary_outputs,
                             requested_outputs=payload.request_outputs)


def main():
    p = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    p.add_argument("--onnx", required=True)
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    args, _ = p.parse_known_args()
    # No access log line per request (uvicorn's default), in the parent and in every worker
    # (each configures logging again from this file).
    config = json.loads(json.dumps(KSERVE_LOG_CONFIG))
    for name in ("kserve", "kserve.trace", "uvicorn", "uvicorn.error", "uvicorn.access"):
        config["loggers"][name]["level"] = "WARNING"
    log_config = os.path.join(tempfile.mkdtemp(prefix="kserve-log-"), "log.json")
    with open(log_config, "w") as f:
        json.dump(config, f)
    kserve.model_server.args.log_config_file = log_config
    kserve.logging.configure_logging(log_config)
    # The parent kills a worker that does not answer its first ping within 5 s and starts
    # another, forever: a spawned worker imports kserve and onnxruntime again, which takes
    # 4.5 CPU-s here, 7.5 s of wall time on this shared 2-core VM. Start-up only; once a worker
    # answers, pings come back at once.
    is_alive = multiprocess_server.RESTServerProcess.is_alive
    multiprocess_server.RESTServerProcess.is_alive = lambda self, timeout=5: is_alive(self, 120)
    model = OnnxModel(args.model_name, os.path.abspath(args.onnx), args.threads)
    kserve.ModelServer(http_port=args.http_port, workers=args.workers, enable_grpc=False,
                       enable_latency_logging=False).start([model])


if __name__ == "__main__":
    main()
