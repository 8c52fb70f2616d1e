#!/usr/bin/env python3
"""bench-secagg's Flower side: Flower 1.42's own SecAgg+ (flwr's SecAggPlusWorkflow on the
server, its secaggplus_mod in every ClientApp) for N clients and a model of P float32
parameters, rounds of FedAvg.

The messages go through an in-process Grid (this file's InProcessGrid): send_and_receive hands
each message to its node's ClientApp (one Context per node, kept across stages, as a SuperNode
keeps it) and returns the replies (each message and reply deep-copied, as the wire would; the
copies are counted in neither figure). No SuperLink, no serialisation, no network: Flower's protocol
computation alone, which is what the figures compare (it leaves out Flower's transport, which
bench-fl-flower measures; that can only make Flower's figures smaller). Everything runs on this
thread, one call at a time, so:
  client s per round   time inside the ClientApps (setup, share keys, masked vector, unmask),
                       divided by N (per client)
  server s per round   the workflow's time minus the client time (the server's key routing,
                       unmasking, dequantization and FedAvg)
One JSON object on stdout: the per-round lists and their medians.
"""

import argparse
import copy
import json
import statistics
import sys
import time
from typing import Dict, List

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--params", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shares", type=int, default=15, help="num_shares (neighbours + itself)")
    ap.add_argument("--threshold", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    import logging

    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.client import NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.clientapp import ClientApp
    from flwr.common import logger as flwr_logger
    from flwr.server import ServerConfig
    from flwr.server.client_manager import SimpleClientManager
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key
    from flwr.serverapp.grid import Grid
    from flwr.supercore.task_identity import TaskIdentity

    # What a ServerApp process has set before its workflow runs (messages carry it).
    TaskIdentity.run_id = 1
    TaskIdentity.node_id = 0
    TaskIdentity.task_id = 1

    flwr_logger.FLOWER_LOGGER.setLevel(logging.WARNING)
    rng = np.random.default_rng(a.seed)
    updates = {nid: [rng.uniform(-0.5, 0.5, a.params).astype(np.float32)]
               for nid in range(1, a.clients + 1)}

    class Trainer(NumPyClient):
        def __init__(self, nid: int) -> None:
            self.nid = nid

        def fit(self, parameters, config):  # type: ignore[no-untyped-def]
            return updates[self.nid], 10, {}

    def client_fn(context: Context):  # type: ignore[no-untyped-def]
        return Trainer(int(context.node_id)).to_client()

    app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])
    contexts = {nid: Context(run_id=1, node_id=nid, node_config={}, state=RecordDict(),
                             run_config={}) for nid in updates}
    client_time = [0.0]
    transport_time = [0.0]

    class InProcessGrid(Grid):
        def set_run(self, run_id):  # type: ignore[no-untyped-def]
            pass

        @property
        def run(self):  # type: ignore[no-untyped-def]
            return None

        def create_message(self, content, message_type, dst_node_id, group_id,  # type: ignore
                           ttl=None):
            return Message(content=content, dst_node_id=dst_node_id, message_type=message_type,
                           group_id=group_id)

        def get_node_ids(self):  # type: ignore[no-untyped-def]
            return list(updates)

        def push_messages(self, messages):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
            out = []
            for m in messages:
                # A copy, as the wire would make: the workflow sends one content object to
                # every node and the mod edits what it receives. Transport: counted in neither.
                t0 = time.perf_counter()
                m = copy.deepcopy(m)
                t1 = time.perf_counter()
                reply = app(m, contexts[m.metadata.dst_node_id])
                t2 = time.perf_counter()
                reply = copy.deepcopy(reply)
                client_time[0] += t2 - t1
                transport_time[0] += (t1 - t0) + (time.perf_counter() - t2)
                out.append(reply)
            return out

    grid = InProcessGrid()
    cm = SimpleClientManager()
    for nid in updates:
        cm.register(GridClientProxy(nid, grid, 1))
    strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=a.clients,
                      min_available_clients=a.clients)
    context = LegacyContext(Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                    run_config={}),
                            config=ServerConfig(num_rounds=a.rounds), strategy=strategy,
                            client_manager=cm)
    context.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord(
        [np.zeros(a.params, np.float32)])
    cfg = ConfigRecord()
    context.state.config_records[MAIN_CONFIGS_RECORD] = cfg
    workflow = SecAggPlusWorkflow(num_shares=a.shares, reconstruction_threshold=a.threshold,
                                  clipping_range=1.0)
    server: List[float] = []
    clients: List[float] = []
    for r in range(1, a.rounds + 1):
        cfg[Key.CURRENT_ROUND] = r
        client_time[0] = transport_time[0] = 0.0
        t0 = time.perf_counter()
        workflow(grid, context)
        wall = time.perf_counter() - t0
        server.append(wall - client_time[0] - transport_time[0])
        clients.append(client_time[0] / a.clients)
    got = context.state.array_records[MAIN_PARAMS_RECORD].to_numpy_ndarrays()[0]
    want = np.mean([u[0] for u in updates.values()], axis=0)
    result: Dict[str, object] = {
        "system": "flower", "clients": a.clients, "params": a.params,
        "server_s": server, "client_s": clients,
        "server_median_s": statistics.median(server),
        "client_median_s": statistics.median(clients),
        "max_abs_error": float(np.max(np.abs(got - want))),
    }
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
