"""The manifest JSON Schema (api/manifest.schema.json), `shoal validate` and `shoal explain`.

- `shoal validate -f` accepts every file of deploy/examples and refuses broken manifests, exit 1
  with the field named and what would be accepted;
- `shoal explain` prints a field's type, description, accepted values and default;
- the schema and shoald's parser agree: on a set of valid and invalid manifests the reference
  JSON Schema implementation (python-jsonschema, Draft 2020-12) on the file, shoal's own schema
  checker (`--against schema`) and shoald's manifest parser (`--against parser`, the code
  POST /v1/functions runs) give the same verdict. What a schema cannot say is listed apart
  (GAPS): the schema accepts those, the parser refuses them, each naming the field.

Run by ctest (manifest_schema.cli), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/manifest_schema_test.py
Needs only the `shoal` binary (no shoald, no root).
"""

import glob
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import BASE_ENV, BIN, ROOT  # noqa: E402

jsonschema = pytest.importorskip("jsonschema")
yaml = pytest.importorskip("yaml")

SHOAL = os.path.join(BIN, "shoal")
SCHEMA_FILE = os.path.join(ROOT, "api", "manifest.schema.json")
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "deploy", "examples", "*.yaml")))
ONNX = os.path.join(ROOT, "tests", "data", "inference", "mlp.onnx")

pytestmark = pytest.mark.skipif(not os.access(SHOAL, os.X_OK), reason=f"{SHOAL} is not built")


def shoal(*args, stdin=None):
    return subprocess.run([SHOAL, *args], input=stdin, text=True, capture_output=True,
                          env=BASE_ENV, timeout=30)


def validate(text, against="both"):
    return shoal("validate", "-f", "-", "--against", against, stdin=text)


def fn(spec, name="f"):
    return f"apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {{name: {name}}}\nspec:\n{spec}"


def job(spec, name="j"):
    return f"apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata: {{name: {name}}}\nspec:\n{spec}"


CLIENTS = "  clients: {expected: 4}\n"

# (manifest, valid?) on which the schema and the parser must agree.
AGREE = [
    (fn("  handler: echo\n"), True),
    (fn("  handler: {builtin: sha256, env: {MY_VAR: x}}\n  concurrency: 8\n"
        "  scale: {min: 1, max: 4}\n  timeout: 30s\n  keepAlive: 2m\n  maxBodySize: 64Mi\n"
        "  auth: token\n  resources: {cpu: 500m, memory: 256Mi, gpu: 0}\n"), True),
    (fn("  handler: echo\n  autoscaling: {policy: kpa, target: 10, keepAlive: histogram,"
        " params: {stableWindow: 60s, panicThreshold: 200}}\n"), True),
    (fn(f"  handler: inference\n  inference: {{modelName: m, source: {{onnx: {ONNX}}},"
        " device: cpu, precision: fp16, threads: 1, maxBatchSize: 8, maxQueueDelay: 1ms}\n"), True),
    (fn("  handler: echo\n  security: {onAnomaly: quarantine, allowedPaths: [/tmp/]}\n"), True),
    (job(CLIENTS), True),
    (job("  algorithm: {name: fedcompass, params: {alpha: 0.9}}\n"
         "  model: {architecture: cnn, hidden: 32, seed: 7}\n  data: {dataset: digits}\n"
         "  clients: {expected: 8, quorum: 4, tokens: [a, b]}\n"
         "  stop: {rounds: 10, accuracy: 0.9}\n  deadlines: {round: 30s}\n"
         "  training: {localSteps: 20, learningRate: 0.05, batchSize: 16}\n"
         "  aggregation: {maxStaleness: 5, maxFanIn: 4, maxLeaves: 2, device: cpu,"
         " robust: {rule: trimmedMean, beta: 0.2, clipNorm: median}}\n"), True),
    (job(CLIENTS + "  aggregation: {robust: {rule: krum, f: 1, m: 2, clipNorm: 5}}\n"), True),
    (job(CLIENTS + "  privacy: {dp: {noiseMultiplier: 1.1, clip: {fixed: 0.5}, delta: 1.0e-6,"
         " budget: 8}}\n"), True),
    (job("  clients: {expected: 40}\n  privacy: {dp: {noiseMultiplier: 1, clip: {adaptive:"
         " {initial: 0.1, targetQuantile: 0.5, learningRate: 0.2}}}}\n"), True),
    # invalid
    ("apiVersion: shoal.dev/v2\nkind: Function\nmetadata: {name: f}\nspec: {handler: echo}\n",
     False),
    ("apiVersion: shoal.dev/v1\nkind: Pod\nmetadata: {name: f}\nspec: {handler: echo}\n", False),
    ("apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: F_1}\nspec: {handler: echo}\n",
     False),
    ("apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: f}\n", False),
    (fn("  handler: echo\n  replicas: 3\n"), False),
    (fn("  handler: python\n"), False),
    (fn("  handler: {builtin: echo, library: /x.so}\n"), False),
    (fn("  handler: echo\n  concurrency: 0\n"), False),
    (fn("  handler: echo\n  concurrency: 2000\n"), False),
    (fn("  handler: echo\n  scale: {min: 64}\n"), False),
    (fn("  handler: echo\n  timeout: soon\n"), False),
    (fn("  handler: echo\n  maxBodySize: lots\n"), False),
    (fn("  handler: echo\n  auth: basic\n"), False),
    (fn("  handler: echo\n  resources: {cpu: two}\n"), False),
    (fn("  handler: echo\n  autoscaling: {policy: hpa}\n"), False),
    (fn("  handler: echo\n  autoscaling: {params: {burst: 3}}\n"), False),
    (fn("  handler: echo\n  security: {onAnomaly: kill}\n"), False),
    (fn("  handler: echo\n  security: {allowedPaths: [tmp]}\n"), False),
    (fn("  handler: inference\n  inference: {source: {onnx: relative.onnx}}\n"), False),
    (fn("  handler: inference\n  inference: {source: {}}\n"), False),
    (fn("  handler: inference\n  inference: {source: {flJob: j}, device: tpu}\n"), False),
    (fn("  handler: inference\n  inference: {source: {flJob: j}, maxBatchSize: 5000}\n"), False),
    (fn("  handler: echo\n  handler2: echo\n"), False),
    (job("  algorithm: {name: fedsgd}\n" + CLIENTS), False),
    (job("  model: {architecture: resnet}\n" + CLIENTS), False),
    (job("  model: {initial: weights.safetensors}\n" + CLIENTS), False),
    (job("  stop: {rounds: 3}\n"), False),
    (job("  clients: {expected: 0}\n"), False),
    (job("  clients: {expected: 2, tokens: [a, a]}\n"), False),
    (job(CLIENTS + "  stop: {accuracy: 1.5}\n"), False),
    (job(CLIENTS + "  training: {learningRate: 0}\n"), False),
    (job(CLIENTS + "  training: {batchSize: 0}\n"), False),
    (job(CLIENTS + "  aggregation: {device: tpu}\n"), False),
    (job(CLIENTS + "  aggregation: {maxFanIn: 0}\n"), False),
    (job(CLIENTS + "  aggregation: {robust: {rule: average}}\n"), False),
    (job(CLIENTS + "  aggregation: {robust: {rule: median, beta: 0.1}}\n"), False),
    (job(CLIENTS + "  aggregation: {robust: {rule: trimmedMean, beta: 0.5}}\n"), False),
    (job(CLIENTS + "  aggregation: {robust: {clipNorm: -1}}\n"), False),
    (job(CLIENTS + "  aggregation: {robust: {clipNorm: mean}}\n"), False),
    (job(CLIENTS + "  algorithm: {name: fedavg, params: {beta: high}}\n"), False),
    (job(CLIENTS + "  privacy: {dp: {clip: {fixed: 1}}}\n"), False),
    (job(CLIENTS + "  privacy: {dp: {noiseMultiplier: -1, clip: {fixed: 1}}}\n"), False),
    (job(CLIENTS + "  privacy: {dp: {noiseMultiplier: 1, clip: {fixed: 0}}}\n"), False),
    (job(CLIENTS + "  privacy: {dp: {noiseMultiplier: 1, clip: {fixed: 1, adaptive: {initial: 1}}}}\n"),
     False),
    (job(CLIENTS + "  privacy: {dp: {noiseMultiplier: 1, clip: {adaptive: {targetQuantile: 2}}}}\n"),
     False),
    (job(CLIENTS + "  privacy: {dp: {noiseMultiplier: 1, clip: {fixed: 1}, delta: 1}}\n"), False),
    (job(CLIENTS + "  privacy: {dp: {noiseMultiplier: 1, clip: {fixed: 1}, epsilon: 3}}\n"), False),
]

# What only the parser can say: the schema accepts these, the parser refuses them naming the
# field (the test asserts the message so a schema that learns to say it moves the case up).
GAPS = [
    (fn("  handler: echo\n  scale: {min: 3, max: 1}\n"), "spec.scale.max: must be >= spec.scale.min"),
    (fn("  handler: echo\n  timeout: 0s\n"), "spec.timeout: must be > 0"),
    (fn("  handler: inference\n  inference: {source: {onnx: /nonexistent/m.onnx}}\n"),
     "spec.inference.source.onnx: no such file on this node"),
    (job("  clients: {expected: 2, quorum: 3}\n"), "spec.clients.quorum: must be <= spec.clients.expected"),
    (job(CLIENTS + "  algorithm: {name: fedbuff}\n  privacy: {dp: {noiseMultiplier: 1, clip: {fixed: 1}}}\n"),
     "spec.privacy.dp: central DP clips each update's change"),
    (fn("  handler: echo\n  autoscaling: {minScale: 2}\n  scale: {min: 1}\n"),
     "spec.autoscaling.minScale: disagrees with spec.scale.min"),
]


@pytest.fixture(scope="module")
def reference():
    with open(SCHEMA_FILE) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_every_example_is_valid(path, reference):
    r = shoal("validate", "-f", path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{path}: valid (") and r.stderr == ""
    for doc in yaml.safe_load_all(open(path)):
        if doc is not None:
            assert not list(reference.iter_errors(doc)), path


BROKEN = [
    (job(CLIENTS + "  aggregation: {device: tpu}\n"),
     'spec.aggregation.device: must be one of: auto, cpu, gpu; got "tpu"'),
    (fn("  handler: echo\n  replicas: 3\n"),
     "spec.replicas: unknown field (known: handler, concurrency, scale, timeout, keepAlive, "
     "maxBodySize, resources, autoscaling, inference, auth, security)"),
    (job("  stop: {rounds: 3}\n"), "spec.clients: required"),
    (fn("  handler: echo\n  concurrency: 2000\n"),
     "spec.concurrency: must be integer from 1 to 1024, got 2000"),
    (job(CLIENTS + "  aggregation: {robust: {rule: median, beta: 0.1}}\n"),
     'spec.aggregation.robust.beta: is a parameter of rule "trimmedMean", not "median"'),
    ("apiVersion: shoal.dev/v1\nkind: Function\nmetadata: {name: F_1}\nspec: {handler: echo}\n",
     "metadata.name: must be string matching ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$, got \"F_1\""),
    (fn("  handler: python\n"), "spec.handler: must be one of: echo, sha256, wordcount, sleep, "
     "inference; or object with fields builtin, env; or object with fields library, symbol, "
     'env; got "python"'),
]


@pytest.mark.parametrize("text,message", BROKEN)
def test_broken_manifests_are_refused_naming_the_field(tmp_path, text, message):
    f = tmp_path / "m.yaml"
    f.write_text(text)
    r = shoal("validate", "-f", str(f))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == f"{f}: {message}\n"


def test_several_documents_and_every_error_at_once(tmp_path):
    f = tmp_path / "two.yaml"
    f.write_text(fn("  handler: echo\n") + "---\n" +
                 job("  clients: {expected: 0}\n  training: {batchSize: 0}\n"))
    r = shoal("validate", "-f", str(f))
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        f"{f}: document 2: spec.clients.expected: must be integer from 1 to 100000, got 0",
        f"{f}: document 2: spec.training.batchSize: must be integer from 1 to 65536, got 0"]


def test_an_unreadable_file_is_exit_2(tmp_path):
    r = shoal("validate", "-f", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and r.stderr == f"{tmp_path}/missing.yaml: cannot read the file\n"


@pytest.mark.parametrize("text,valid", AGREE)
def test_schema_and_parser_agree(text, valid, reference):
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    ref_errors = [e.message for d in docs for e in reference.iter_errors(d)]
    assert (not ref_errors) == valid, ref_errors
    schema = validate(text, "schema")
    parser = validate(text, "parser")
    assert (schema.returncode == 0) == valid, schema.stderr
    assert (parser.returncode == 0) == valid, parser.stderr
    if not valid:
        # Both name a field: "-: <field>: ..." (stdin is "-").
        for r in (schema, parser):
            assert r.stderr.startswith("-: ") and ": " in r.stderr[3:], r.stderr


@pytest.mark.parametrize("text,message", GAPS)
def test_what_only_the_parser_says(text, message, reference):
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert not [e for d in docs for e in reference.iter_errors(d)]
    assert validate(text, "schema").returncode == 0
    r = validate(text)
    assert r.returncode == 1 and message in r.stderr, r.stderr


def test_explain_a_leaf_field():
    r = shoal("explain", "fljob.spec.aggregation.device")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "KIND:     FLJob\n"
        "FIELD:    spec.aggregation.device <string>\n"
        "\nDESCRIPTION:\n"
        "  where leaves fold: auto (GPU for updates of 4 MiB and more, when one is visible), "
        "cpu, gpu\n"
        "\nACCEPTS:\n  one of: auto, cpu, gpu\n"
        "\nDEFAULT:  auto\n")


def test_explain_an_object_lists_its_fields():
    r = shoal("explain", "fljob.spec.aggregation")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["KIND:     FLJob", "FIELD:    spec.aggregation <object>"]
    assert "FIELDS:" in lines
    assert "  maxFanIn <integer> (default 8)" in lines
    assert "    accepts: integer from 1 to 1024" in lines
    assert "  device <string> (default auto)" in lines
    assert "  robust <object>" in lines
    r = shoal("explain", "Function.spec.handler")
    assert r.returncode == 0 and "FIELD:    spec.handler <string | object>" in r.stdout


def test_explain_an_unknown_field_names_the_known_ones():
    r = shoal("explain", "fljob.spec.aggregator")
    assert r.returncode == 1
    assert r.stderr == ("shoal explain: field 'aggregator' does not exist in fljob.spec (fields: "
                        "algorithm, model, data, clients, stop, deadlines, training, "
                        "aggregation, privacy, flower, durability)\n")
    r = shoal("explain", "pod.spec")
    assert r.returncode == 1
    assert r.stderr == "shoal explain: 'pod': not a kind (one of: function, fljob)\n"
