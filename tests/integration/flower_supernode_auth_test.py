"""SuperNode allow-lists (spec.flower.supernodes, `shoal fl supernode`) with real flower-supernode
processes (flwr 1.42, REST transport, `--auth-supernode-private-key` with real `ssh-keygen -t
ecdsa -b 384` keys from tests/fl/flower/keys) against a real shoald, as Flower's SuperLink with
--enable-supernode-auth answers them:

- a node whose key no job lists exits: "[code: 2004] Failed to activate SuperNode.";
- a node without a key (it registers itself) exits: "[code: 2001] SuperNode authentication is
  enabled. All SuperNodes must be registered via the CLI.";
- the listed key's node activates; a key registered with `shoal fl supernode register` then
  activates too; `shoal fl supernode list` shows both online;
- `shoal fl supernode unregister` makes the node's next call 401: the flower-supernode process
  exits, and the list holds the other node only.

flower-supernode insists on TLS when it is given a key, and shoald's gateway speaks plain HTTP:
the keyed nodes reach it through a TLS relay on loopback (asyncio, the test CA in keys/ca.pem,
127.0.0.1's certificate keys/tls.pem), as a deployment puts a TLS terminator before the gateway.
The job waits for a third client, so no train message (no ClientApp) runs: lean. Skips naming
what is missing (root, shoald, flwr in the venv).
"""

import asyncio
import os
import signal
import ssl
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from shoal_testlib import ROOT, StandaloneShoald, free_port, skip_reason  # noqa: E402

pytest.importorskip("flwr", reason="flwr 1.42 is not installed in the venv (requirements/test.in)")

APP = os.path.join(ROOT, "tests", "fl", "flower", "app")
KEYS = os.path.join(ROOT, "tests", "fl", "flower", "keys")
VENV_BIN = os.path.dirname(sys.executable)

_why = skip_reason(["shoald", "shoal"])
if _why is None and not os.access(os.path.join(VENV_BIN, "flower-supernode"), os.X_OK):
    _why = f"{VENV_BIN}/flower-supernode is missing"
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")


def flwr_env(home):
    os.makedirs(home, exist_ok=True)
    return dict(os.environ, FLWR_HOME=home, FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
                PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"))


class TlsRelay:
    """TLS on 127.0.0.1:`port`, relayed byte for byte to the gateway's plain HTTP port."""

    def __init__(self, target):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(KEYS, "tls.pem"), os.path.join(KEYS, "tls.key"))
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def pipe(reader, writer):
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (OSError, ssl.SSLError):
                pass
            finally:
                writer.close()

        async def handle(reader, writer):
            try:
                up_r, up_w = await asyncio.open_connection("127.0.0.1", target)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

        async def start():
            self.server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(
            target=lambda: (self.loop.run_until_complete(start()), self.loop.run_forever()),
            daemon=True)
        self.thread.start()
        assert ready.wait(10), "the TLS relay did not start"

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class SuperNode:
    """One flower-supernode with `key` (a private key file: over TLS) or none (plain HTTP; it
    makes a key and registers itself)."""

    def __init__(self, tmp, superlink, key, tag):
        self.log_path = os.path.join(tmp, f"supernode-{tag}.log")
        self.log = open(self.log_path, "wb")
        argv = [os.path.join(VENV_BIN, "flower-supernode"), "--superlink", superlink,
                "--port", str(free_port())]
        if key:
            argv += ["--auth-supernode-private-key", key,
                     "--root-certificates", os.path.join(KEYS, "ca.pem")]
        else:
            argv += ["--insecure"]
        self.proc = subprocess.Popen(argv, env=flwr_env(os.path.join(tmp, f"home-{tag}")),
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def exited(self, timeout):
        """The exit code within `timeout` s (the log on failure)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s:\n{self.text()[-3000:]}")

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()

    def text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


def build_fab(tmp):
    out = os.path.join(tmp, "fab")
    os.makedirs(out, exist_ok=True)
    r = subprocess.run([os.path.join(VENV_BIN, "flwr"), "build", "--app", APP], cwd=out,
                       env=flwr_env(os.path.join(tmp, "flwr-build")), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return os.path.join(out, [f for f in os.listdir(out) if f.endswith(".fab")][0])


def supernodes(d, job):
    return {n["nodeId"]: n for n in d.api(f"/v1/jobs/{job}/flower/supernodes")["supernodes"]}


def wait_online(d, job, n, nodes, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        listed = supernodes(d, job)
        if sum(s["status"] == "online" for s in listed.values()) == n:
            return listed
        for node in nodes:
            assert node.proc.poll() is None, node.text()[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"{listed}\n" + "\n".join(x.text()[-1500:] for x in nodes))


def test_only_registered_keys_activate_and_unregistering_stops_the_node(tmp_path):
    tmp = str(tmp_path)
    fab = build_fab(tmp)
    job = f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata: {{name: guarded}}
spec:
  algorithm: {{name: fedavg}}
  model: {{architecture: cnn, hidden: 32, seed: 1}}
  clients: {{expected: 3}}
  stop: {{rounds: 1}}
  flower:
    fab: {fab}
    supernodes: [{KEYS}/node-a.pub]
"""
    nodes = []
    with StandaloneShoald(tmp, "fa") as d:
        d.deploy(job)
        relay = TlsRelay(d.port)
        link = f"127.0.0.1:{relay.port}"
        try:
            listed = supernodes(d, "guarded")
            assert [s["status"] for s in listed.values()] == ["registered"]
            assert list(listed.values())[0]["publicKey"] == open(f"{KEYS}/node-a.pem").read()
            # An unlisted key, and a node that registers itself: refused, the processes exit;
            # the listed node activates (the three started at once).
            b0 = SuperNode(tmp, link, f"{KEYS}/node-b", "b0")
            s0 = SuperNode(tmp, f"127.0.0.1:{d.port}", None, "self")
            a = SuperNode(tmp, link, f"{KEYS}/node-a", "a")
            nodes += [b0, s0, a]
            assert b0.exited(120) != 0
            assert "[code: 2004] Failed to activate SuperNode." in b0.text(), b0.text()[-2000:]
            assert s0.exited(120) != 0
            assert ("[code: 2001] SuperNode authentication is enabled. All SuperNodes must be "
                    "registered via the CLI.") in s0.text(), s0.text()[-2000:]
            wait_online(d, "guarded", 1, [a])
            # b's key registered through the CLI: b activates.
            r = d.cli("fl", "supernode", "register", "guarded", f"{KEYS}/node-b.pub")
            assert r.returncode == 0, r.stdout + r.stderr
            assert r.stdout.startswith("SuperNode ") and "registered in job guarded" in r.stdout
            b = SuperNode(tmp, link, f"{KEYS}/node-b", "b")
            nodes.append(b)
            listed = wait_online(d, "guarded", 2, [a, b])
            r = d.cli("fl", "supernode", "list", "guarded")
            assert r.returncode == 0 and r.stdout.count("online") == 2, r.stdout + r.stderr
            again = d.cli("fl", "supernode", "register", "guarded", f"{KEYS}/node-b.pub")
            assert again.returncode == 1 and "Public key already in use" in again.stderr
            # a unregistered: its next call is 401 and flower-supernode stops; b stays.
            a_id = next(i for i, s in listed.items()
                        if s["publicKey"] == open(f"{KEYS}/node-a.pem").read())
            r = d.cli("fl", "supernode", "unregister", "guarded", str(a_id))
            assert r.returncode == 0, r.stdout + r.stderr
            a.exited(120)
            listed = supernodes(d, "guarded")
            assert [s["publicKey"] for s in listed.values()] == [open(f"{KEYS}/node-b.pem").read()]
            assert b.proc.poll() is None, b.text()[-2000:]
        finally:
            for n in nodes:
                n.stop()
            relay.close()
