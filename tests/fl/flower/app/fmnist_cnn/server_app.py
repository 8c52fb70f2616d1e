"""The ServerApp for Flower's own SuperLink (Shoal plays this part itself from the FLJob): flwr's
FedAvg over every node, the train config {"lr"}, each round's global model saved to dump-dir."""

import os

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from .task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    nodes = int(cfg.get("num-nodes", 4))
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=1.0, min_train_nodes=nodes,
                      min_evaluate_nodes=nodes, min_available_nodes=nodes)
    if cfg["init-npz"]:
        with np.load(str(cfg["init-npz"])) as z:
            arrays = ArrayRecord({k: Array(np.ascontiguousarray(z[k])) for k in z.files})
    else:
        arrays = ArrayRecord(Net(int(cfg["hidden"])).state_dict())
    dump = str(cfg["dump-dir"])

    def save(server_round, record):
        if dump:
            np.savez(os.path.join(dump, f"flower-global-{server_round}.npz"),
                     **{k: v.numpy() for k, v in record.items()})

    strategy.start(grid=grid, initial_arrays=arrays, num_rounds=int(cfg["num-server-rounds"]),
                   train_config=ConfigRecord({"lr": float(cfg["learning-rate"])}),
                   evaluate_fn=save, timeout=600)
