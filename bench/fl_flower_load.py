#!/usr/bin/env python3
"""bench-fl-flower's clients: one load generator for both servers, speaking each one's own
client protocol with replies computed before the clock starts.

  --system shoal: Shoal's FL client protocol through the Python SDK (shoal/fl/sdk/python, shoal_fl):
    join; per round GET task, GET model, POST the update (SHU1 body).
  --system flower: Flower 1.42's Fleet API (protobuf over HTTP) through flwr's own client pieces
    (FleetHttpClient with the SuperNode's signing and version interceptors, its object pull/push
    helpers): register + activate a node; per round PullMessages, PullObject for every object of
    the message (the global model), ConfirmMessageReceived, PushMessages with the reply's object
    tree, PushObject for every object the SuperLink asks for. Heartbeat interval 1800 s, Flower's
    maximum (a SuperNode's default is 30 s: under load a late beat drops the node and its
    instruction). This script starts flower-superlink (--insecure, subprocess isolation,
    in-memory state, no runtime dependency installation) and submits bench/flower_app with
    `flwr run`; the ServerApp runs flwr's FedAvg.

Both: N clients served by W worker threads (client k on thread k mod W, one after another, as
bench-round's senders); every client's update has the model's shapes and its own values (Flower's
object store keeps one copy of identical objects, which real clients never send). Rounds:
the server runs R+1; round r's model is "available" when client 0's poll (every 5 ms, on the
probe thread) sees it, its "commit" when client 0 sees round r+1's; CPU is every server process's
utime+stime (/proc, the server's process and all its descendants) sampled at those moments, RSS
the sum of those processes' Pss sampled every 20 ms. One JSON object on stdout.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

TICK = os.sysconf("SC_CLK_TCK")


# ---- the server's processes ------------------------------------------------------------------

def _procs():
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rfind(b")") + 2:].split()
        out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK)
    return out


def tree(root):
    procs = _procs()
    pids, i = [root], 0
    while i < len(pids):
        pids += [p for p, (pp, _) in procs.items() if pp == pids[i]]
        i += 1
    return pids, procs


def tree_cpu(root):
    pids, procs = tree(root)
    return sum(procs[p][1] for p in pids if p in procs)


def tree_rss(root):
    """The processes' proportional set size (Pss: a page shared by k of them counts 1/k to
    each, so shared memory such as shoald's pool or a library is counted once in the sum)."""
    pids, _ = tree(root)
    return sum(_pss(p) for p in pids)


def _pss(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_names(root):
    """Each server process: its command and its Pss now (MB)."""
    pids, _ = tree(root)
    names = []
    for p in pids:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            name = " ".join(os.path.basename(a.decode()) for a in argv[:2] if a)
            names.append(f"{name} ({_pss(p) / 1e6:.0f} MB)")
        except OSError:
            pass
    return names


class RssSampler(threading.Thread):
    def __init__(self, root):
        super().__init__(daemon=True)
        self.root, self.peak, self.stop = root, 0, threading.Event()

    def run(self):
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, tree_rss(self.root))


# ---- the model every client sends ---------------------------------------------------------------

def client_arrays(shapes, k):
    """Client k's tensors: the shapes given, values its own (seeded by k)."""
    rng = np.random.default_rng(1000 + k)
    return [rng.standard_normal(s, dtype=np.float32) * 0.01 for s in shapes]


def mlp_shapes(hidden):
    return [(hidden, 784), (hidden,), (10, hidden), (10,)]


# ---- Shoal -------------------------------------------------------------------------------------

class ShoalNode:
    def __init__(self, args, k, names, shapes):
        from shoal_fl.job_client import JobClient

        self.c = JobClient(args.server, args.job, token=args.api_token, timeout=600)
        self.member = self.c.join(name=f"load-{k}")
        self.names, self.arrays, self.k = names, client_arrays(shapes, k), k
        self.dtype = args.wire_dtype
        self.wire_bytes = 0
        self.task = None

    def poll(self, version):
        """True when this client's task is to train from `version`."""
        if self.task is None:
            t = self.c.task(self.member)
            if t.kind == "train" and t.model_version >= version:
                self.task = t
        return self.task is not None

    def round(self, version):
        from shoal_fl.update_format import EncodedUpdate, UpdateMeta

        while not self.poll(version):
            time.sleep(0.005)
        v = self.task.model_version
        self.task = None
        base = self.c._base
        self.c._request("GET", f"{base}/model?version={v}")
        meta = UpdateMeta(self.c.job, self.member.client_id, self.member.token, v, 100 + self.k)
        update = EncodedUpdate(meta, self.names, self.arrays, self.dtype)
        self.wire_bytes = len(update)
        self.c._request("POST", base + "/updates", update, "application/octet-stream")
        return time.monotonic()


# ---- Flower ------------------------------------------------------------------------------------

class FlowerNode:
    def __init__(self, address, k, names, shapes):
        from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
        from flwr.common.constant import HEARTBEAT_MAX_INTERVAL
        from flwr.proto.fleet_pb2 import ActivateNodeRequest, RegisterNodeFleetRequest
        from flwr.proto.node_pb2 import Node
        from flwr.supercore.inflatable.inflatable_object import (get_all_nested_objects,
                                                                 no_object_id_recompute)
        from flwr.supercore.interceptors.http.runtime_version import RuntimeVersionHttpInterceptor
        from flwr.supercore.primitives.asymmetric import generate_key_pairs, public_key_to_bytes
        from flwr.supernode.fleet_http_client import FleetHttpClient
        from flwr.supernode.node_auth_http_interceptor import NodeAuthHttpInterceptor

        private_key, public_key = generate_key_pairs()
        pk = public_key_to_bytes(public_key)
        self._cm = FleetHttpClient.from_server_address(
            address, True, None,
            interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperNode"),
                          NodeAuthHttpInterceptor(private_key, public_key)])
        self.c = self._cm.__enter__()
        # Every call through flwr's retry invoker, as a SuperNode makes them (a timed-out
        # call is retried, not failed).
        from flwr.supercore.retry import make_simple_http_retry_invoker

        self.retry = make_simple_http_retry_invoker()
        self.c.RegisterNode(RegisterNodeFleetRequest(public_key=pk))
        # Flower's largest heartbeat interval (1800 s; flower-supernode sends 30): under load a
        # late beat gets a node dropped with its instruction, and beats cost the SuperLink CPU.
        self.interval = HEARTBEAT_MAX_INTERVAL
        r = self.c.ActivateNode(ActivateNodeRequest(public_key=pk,
                                                    heartbeat_interval=self.interval))
        self.node = Node(node_id=r.node_id)
        arrays = client_arrays(shapes, k)
        self.content = RecordDict({
            "arrays": ArrayRecord({n: Array(a) for n, a in zip(names, arrays)}),
            "metrics": MetricRecord({"num-examples": 100 + k}),
        })
        # The reply's objects (but the message itself, whose metadata names the instruction it
        # answers) deflated once, here.
        with no_object_id_recompute():
            self.objects = {i: o.deflate()
                            for i, o in get_all_nested_objects(self.content).items()}
        self.pending = None

    def heartbeat(self):
        from flwr.proto.heartbeat_pb2 import SendNodeHeartbeatRequest

        self.c.SendNodeHeartbeat(SendNodeHeartbeatRequest(node=self.node,
                                                          heartbeat_interval=self.interval))

    def poll(self, _version=None):
        from flwr.common.serde import message_from_proto
        from flwr.proto.fleet_pb2 import PullMessagesRequest

        if self.pending is None:
            r = self.retry.invoke(self.c.PullMessages, PullMessagesRequest(node=self.node))
            if r.messages_list:
                self.pending = (message_from_proto(r.messages_list[0]),
                                r.message_object_trees[0])
        return self.pending is not None

    def round(self, _version=None):
        from flwr.app import Message
        from flwr.app.message import remove_content_from_message
        from flwr.common.serde import message_to_proto
        from flwr.proto.fleet_pb2 import PushMessagesRequest
        from flwr.supercore.inflatable.inflatable_object import (_get_computed_object_ids,
                                                                 get_object_tree,
                                                                 iterate_object_tree,
                                                                 no_object_id_recompute)
        from flwr.supercore.inflatable.inflatable_protobuf_utils import (
            make_confirm_message_received_fn_protobuf, make_pull_object_fn_protobuf,
            make_push_object_fn_protobuf)
        from flwr.supercore.inflatable.inflatable_utils import (
            pull_objects, push_object_contents_from_iterable)

        while not self.poll():
            time.sleep(0.005)
        msg, msg_tree = self.pending
        self.pending = None
        run_id = msg.metadata.run_id
        # Download the instruction's objects (the global model), as a SuperNode does, and
        # confirm it (the SuperLink then drops them).
        ids = [t.object_id for t in iterate_object_tree(msg_tree)]
        pull_objects(ids, pull_object_fn=make_pull_object_fn_protobuf(
            lambda q: self.retry.invoke(self.c.PullObject, q), self.node, run_id))
        make_confirm_message_received_fn_protobuf(
            lambda q: self.retry.invoke(self.c.ConfirmMessageReceived, q), self.node,
            run_id)(msg.metadata.message_id)
        with no_object_id_recompute():
            # The content's ids were computed in __init__: this context may reuse them.
            _get_computed_object_ids().update(self.objects)
            reply = Message(self.content, reply_to=msg)
            reply_id = reply.object_id
            reply.metadata.__dict__["_message_id"] = reply_id
            tree = get_object_tree(reply)
            contents = dict(self.objects)
            contents[reply_id] = reply.deflate()
        r = self.retry.invoke(self.c.PushMessages, PushMessagesRequest(
            node=self.node, messages_list=[message_to_proto(remove_content_from_message(reply))],
            message_object_trees=[tree], clientapp_runtime_list=[0.0]))
        want = set(r.objects_to_push)
        push_object_contents_from_iterable(
            ((t.object_id, contents[t.object_id]) for t in iterate_object_tree(tree)
             if t.object_id in want),
            push_object_fn=make_push_object_fn_protobuf(
                lambda q: self.retry.invoke(self.c.PushObject, q), self.node, run_id,
                r.session_id))
        return time.monotonic()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


class FlowerServer:
    """flower-superlink from this venv, started here and stopped (its process tree) at exit."""

    def __init__(self, args, work, simulation=False, options=None):
        self.work = work
        self.port = args.port or free_port()
        self.home = os.path.join(work, "flwr-home")
        os.makedirs(self.home, exist_ok=True)
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write('[superlink]\ndefault = "bench"\n\n[superlink.bench]\n'
                    f'address = "127.0.0.1:{self.port}"\ninsecure = true\n')
            for key, value in (options or {}).items():  # the simulation's federation options
                f.write(f"options.{key} = {json.dumps(value)}\n")
        self.env = dict(os.environ, FLWR_HOME=self.home,
                        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1")
        if args.flwr_log_level:
            self.env["FLWR_LOG_LEVEL"] = args.flwr_log_level
        bindir = os.path.dirname(sys.executable)
        self.bindir = bindir
        self.log = open(os.path.join(work, "superlink.log"), "wb")
        self.proc = subprocess.Popen(
            [os.path.join(bindir, "flower-superlink"), "--insecure", "--host", "127.0.0.1",
             "--port", str(self.port), "--disable-runtime-dependency-installation"]
            + (["--simulation"] if simulation else []),
            env=dict(self.env, PATH=bindir + os.pathsep + os.environ.get("PATH", "")),
            stdout=self.log, stderr=subprocess.STDOUT, cwd=work)
        if not wait_port(self.port, self.proc, 60):
            raise RuntimeError("flower-superlink did not start: " + self.tail())

    def tail(self):
        self.log.flush()
        with open(os.path.join(self.work, "superlink.log"), "rb") as f:
            return f.read()[-3000:].decode("utf-8", "replace")

    def submit(self, app_dir, run_config):
        r = subprocess.run(
            [os.path.join(self.bindir, "flwr"), "run", app_dir, "bench", "--format", "json",
             "--run-config", run_config],
            env=dict(self.env, PATH=self.bindir + os.pathsep + os.environ.get("PATH", "")),
            capture_output=True, text=True, timeout=300, cwd=self.work)
        if r.returncode != 0:
            raise RuntimeError(f"flwr run failed ({r.returncode}): {r.stdout[-2000:]} "
                               f"{r.stderr[-2000:]}")
        return r.stdout.strip()

    def _flwr(self, *args, timeout=60):
        return subprocess.run(
            [os.path.join(self.bindir, "flwr"), *args],
            env=dict(self.env, PATH=self.bindir + os.pathsep + os.environ.get("PATH", "")),
            capture_output=True, text=True, timeout=timeout, cwd=self.work)

    def run_failure(self, submitted):
        """Why the run `submit` returned (its JSON) finished without completing, with the end of
        its log; None while it runs or once it completed. A simulation that raises leaves the
        SuperLink up, so a driver waiting for its output would otherwise wait out its limit."""
        try:
            run_id = json.loads(submitted)["run-id"]
            r = self._flwr("ls", "bench", "--run-id", str(run_id), "--format", "json")
            status = json.loads(r.stdout)["runs"][0]["status"]
        except (ValueError, KeyError, IndexError, TypeError, subprocess.TimeoutExpired):
            return None  # not known yet: asked again later
        if not status.startswith("finished") or status.endswith(":completed"):
            return None
        log = self._flwr("log", str(run_id), "bench", "--show").stdout
        return f"run {run_id} {status}: ...{log[-3000:]}"

    def stop(self):
        pids, _ = tree(self.proc.pid)
        for p in reversed(pids):
            try:
                os.kill(p, signal.SIGTERM)
            except OSError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        self.log.close()


# ---- the rounds --------------------------------------------------------------------------------

def run_rounds(nodes, root, rounds, workers, deadline, upload_cap):
    """Drives `rounds` rounds; returns the per-round figures. A round whose uploads take longer
    than `upload_cap` seconds is cut there: its entry is partial (the uploads done, the CPU and
    the seconds they took) and no later round runs."""
    probe = nodes[0]
    out = []
    # Round 1's model available (the run has started).
    while not probe.poll(0):
        if time.monotonic() > deadline:
            raise RuntimeError("round 1 never became available")
        time.sleep(0.005)
    t_prev = time.monotonic()
    cpu_prev = tree_cpu(root)
    for r in range(1, rounds + 1):
        done = [0.0] * workers
        uploads = [0] * workers
        errors = []
        cut = threading.Event()

        def work(w):
            try:
                for k in range(w, len(nodes), workers):
                    if cut.is_set():
                        return
                    done[w] = max(done[w], nodes[k].round(r - 1))
                    uploads[w] += 1
            except Exception as e:  # noqa: BLE001 - reported in the JSON
                errors.append(f"{type(e).__name__}: {e}")

        threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
        for t in threads:
            t.start()
        cap_end = t_prev + upload_cap
        while any(t.is_alive() for t in threads):
            if upload_cap > 0 and time.monotonic() > cap_end and not cut.is_set():
                cut.set()
            threads[0].join(0.1) if threads[0].is_alive() else time.sleep(0.05)
        if errors:
            raise RuntimeError(f"round {r}: {len(errors)} worker(s) failed: {errors[0]}")
        t_last = max(done)
        if cut.is_set():
            out.append({"round": r, "partial": True, "uploads": sum(uploads),
                        "window_s": t_last - t_prev, "cpu_s": tree_cpu(root) - cpu_prev,
                        "t_start": t_prev})
            break
        while not probe.poll(r):
            if time.monotonic() > deadline:
                raise RuntimeError(f"round {r} never committed")
            time.sleep(0.005)
        t_commit = time.monotonic()
        cpu = tree_cpu(root)
        out.append({"round": r, "round_s": t_commit - t_prev, "commit_s": t_commit - t_last,
                    "cpu_s": cpu - cpu_prev, "t_last": t_last, "t_commit": t_commit,
                    "t_start": t_prev})
        t_prev, cpu_prev = t_commit, cpu
    return out


def main():
    # SIGTERM (the driver's timeout) still stops the SuperLink this script started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=["shoal", "flower"], required=True)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--max-seconds", type=float, default=1200)
    ap.add_argument("--upload-cap", type=float, default=0,
                    help="cut a round whose uploads take longer (s; 0: never)")
    # shoal
    ap.add_argument("--server", default="")
    ap.add_argument("--job", default="")
    ap.add_argument("--api-token", default="")
    ap.add_argument("--root-pid", type=int, default=0)
    ap.add_argument("--wire-dtype", default="f32", help="the updates' wire format (f32, bf16, "
                    "int8, int4; the job must allow it)")
    # flower
    ap.add_argument("--app-dir", default=os.path.join(os.path.dirname(__file__), "flower_app"))
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--flwr-log-level", default="")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    args = ap.parse_args()
    deadline = time.monotonic() + args.max_seconds
    names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    shapes = mlp_shapes(args.hidden)
    workers = max(1, min(args.workers, args.clients))
    result = {"system": args.system, "clients": args.clients, "hidden": args.hidden,
              "workers": workers, "update_bytes": int(sum(np.prod(s) for s in shapes) * 4)}
    server = None
    work = tempfile.mkdtemp(prefix="bench-fl-flower-")
    try:
        t0 = time.monotonic()
        if args.system == "shoal":
            root = args.root_pid
            # The job's own tensor names and shapes (the same bytes as Flower's arrays).
            from shoal_fl import safetensors
            from shoal_fl.job_client import JobClient

            c = JobClient(args.server, args.job, token=args.api_token)
            _, _, body = c._request("GET", c._base + "/model")
            names, arrays, _ = safetensors.load(body)
            shapes = [a.shape for a in arrays]
            c.close()
            result["update_bytes"] = int(sum(a.nbytes for a in arrays))
            nodes = [ShoalNode(args, k, names, shapes) for k in range(args.clients)]
            sampler = RssSampler(root)
            sampler.start()
            result["setup_s"] = time.monotonic() - t0
            result["setup_cpu_s"] = tree_cpu(root)
            result["rounds"] = run_rounds(nodes, root, args.rounds, workers, deadline,
                                          args.upload_cap)
            result["wire_bytes"] = nodes[0].wire_bytes
        else:
            server = FlowerServer(args, work)
            root = server.proc.pid
            sampler = RssSampler(root)
            sampler.start()
            address = f"127.0.0.1:{server.port}"
            nodes = [FlowerNode(address, k, names, shapes) for k in range(args.clients)]
            stop_hb = threading.Event()

            def heartbeats():
                while not stop_hb.wait(nodes[0].interval):
                    for n in nodes:
                        try:
                            n.heartbeat()
                        except Exception:  # noqa: BLE001 - a missed beat is the server's call
                            pass

            hb = threading.Thread(target=heartbeats, daemon=True)
            hb.start()
            out_dir = os.path.join(work, "serverapp")
            os.makedirs(out_dir, exist_ok=True)
            result["flwr_run"] = server.submit(
                os.path.abspath(args.app_dir),
                f"num-clients={args.clients} hidden={args.hidden} "
                f"num-server-rounds={args.rounds + 1} mode='load' out-dir='{out_dir}'")
            result["setup_s"] = time.monotonic() - t0
            result["setup_cpu_s"] = tree_cpu(root)
            result["rounds"] = run_rounds(nodes, root, args.rounds, workers, deadline,
                                          args.upload_cap)
            stop_hb.set()
            # The ServerApp's own times: when each round's replies reached FedAvg and when its
            # aggregate was done (CLOCK_MONOTONIC, as ours).
            agg = {}
            try:
                with open(os.path.join(out_dir, "aggregate_times.txt")) as f:
                    for line in f:
                        rr, n, a0, a1 = line.split()
                        agg[int(rr)] = (float(a0), float(a1), int(n))
            except OSError:
                pass
            for rd in result["rounds"]:
                if rd["round"] in agg:
                    a0, a1, n = agg[rd["round"]]
                    rd["replies"] = n  # what FedAvg aggregated (error replies are left out)
                    rd["replies_pulled_s"] = a0 - rd["t_last"]  # last upload -> FedAvg has all
                    rd["aggregate_s"] = a1 - a0
        result["peak_rss_bytes"] = max(sampler.peak, tree_rss(root))
        sampler.stop.set()
        result["processes"] = tree_names(root)
        result["ok"] = True
    except Exception as e:  # noqa: BLE001 - the driver prints it
        result["ok"] = False
        result["error"] = f"{type(e).__name__}: {e}"
        if server is not None:
            result["superlink_log"] = server.tail()
    finally:
        if server is not None:
            server.stop()
        if args.keep:
            result["work"] = work
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
