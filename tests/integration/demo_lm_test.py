"""scripts/demo --lm --once, as a user runs it, against the build (issue 36: "a user can run the
demo's language-model variant ... in CI"): three PyTorch clients fine-tune LoRA adapters of the
cached shoal-gpt base federatedly (FedIT, 2 rounds here) while the lm function streams an OpenAI
completion from each version as it commits.

The demo runs in a network namespace of its own (unshare --net, loopback up), so its ports (8080,
8081) meet nothing else on this machine, with SHOAL_DEMO_PREBUILT=1: the set-up that scripts/test
already did is not redone, the binaries are the build's. Asserted from its output: every version
0..2 answered a streamed completion with usage counts, the fingerprint names the adapter version
that answered, the clients' perplexity lines, and the demo's own --once verdict (exit 0).

Needs root (shoald, unshare), torch and the cached base model (scripts/lm-path); skips naming
what is missing.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import BIN, ROOT, skip_reason  # noqa: E402

ROUNDS = 2
DEADLINE_S = 300  # the demo's own deadline for the job's rounds


def _why_skip():
    reason = skip_reason(["shoald", "shoal", "shoal-fn"])
    if reason:
        return reason
    for tool in ("unshare", "ip", "curl"):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed in the venv"
    lm = subprocess.run([os.path.join(ROOT, "scripts", "lm-path")], capture_output=True, text=True)
    if lm.returncode != 0:
        return lm.stderr.strip()
    return None


@pytest.mark.skipif(_why_skip() is not None, reason=str(_why_skip()))
def test_demo_lm_streams_a_completion_from_every_version():
    state = tempfile.mkdtemp(prefix="shoal-demo-lm-")
    env = dict(os.environ, SHOAL_DEMO_PREBUILT="1", SHOAL_BIN_DIR=BIN, SHOAL_LM_ROUNDS=str(ROUNDS),
               SHOAL_LM_SECONDS=str(DEADLINE_S), SHOAL_STATE_DIR=state)
    cmd = ["unshare", "--net", "bash", "-c",
           "ip link set lo up && exec " + os.path.join(ROOT, "scripts", "demo") + " --lm --once"]
    try:
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=DEADLINE_S + 120)
        out = run.stdout + run.stderr
        log = ""
        if os.path.exists(os.path.join(state, "shoald.log")):
            with open(os.path.join(state, "shoald.log")) as f:
                log = f.read()[-4000:]
        assert run.returncode == 0, out[-6000:] + "\n--- shoald.log ---\n" + log
        # Each version committed during the run announced itself and answered.
        for v in range(1, ROUNDS + 1):
            assert f"--- version {v} committed" in out, out[-6000:]
        # One summary line per streamed answer: version 0 (the base: LoRA's B starts at zero),
        # then each committed version, each naming the adapter version that answered.
        summaries = re.findall(
            r"\[(shoal-gpt-ft-v(\d+)); (\d+) prompt \+ (\d+) completion tokens, (\d+) pieces\]", out)
        assert [int(s[1]) for s in summaries] == list(range(0, ROUNDS + 1)), out[-6000:]
        for _, _, prompt, completion, pieces in summaries:
            assert int(prompt) == len("The read() system call")  # tokens are bytes
            assert 1 <= int(completion) <= 48
            assert int(pieces) >= 1
        # The three clients' held-out perplexity lines (client-k.log's last line).
        assert out.count("(each client's held-out perplexity per version") == 1
        assert "Done (--once): stopping shoald" in out
    finally:
        shutil.rmtree(state, ignore_errors=True)
