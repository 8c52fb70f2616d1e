"""The ServerApp bench-fl-flower submits: flwr's FedAvg over every SuperNode, every round.

FedAvg here is flwr.serverapp.strategy.FedAvg itself; the subclass only notes, on
CLOCK_MONOTONIC, when each round's replies reached the strategy and when its aggregate was
done (load mode), or saves each round's global model for the bench to evaluate (train mode).
With dp-noise >= 0 (bench-dp), FedAvg is wrapped in flwr's own
DifferentialPrivacyServerSideFixedClipping (noise multiplier dp-noise, clipping norm dp-clip).
"""

import os
import time

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

from .model import initial_arrays

app = ServerApp()


class TimedFedAvg(FedAvg):
    """FedAvg, with each round's aggregation times appended to `timing_path`."""

    def __init__(self, timing_path: str, **kwargs):
        super().__init__(**kwargs)
        self.timing_path = timing_path

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        t0 = time.monotonic()
        out = super().aggregate_train(server_round, replies)
        t1 = time.monotonic()
        if self.timing_path:
            with open(self.timing_path, "a", encoding="utf-8") as f:
                valid = sum(1 for m in replies if not m.has_error())
                f.write(f"{server_round} {valid} {t0:.6f} {t1:.6f}\n")
        return out


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    n = int(cfg["num-clients"])
    rounds = int(cfg["num-server-rounds"])
    mode = str(cfg["mode"])
    out_dir = str(cfg["out-dir"])
    timing = os.path.join(out_dir, "aggregate_times.txt") if out_dir and mode == "load" else ""
    # Every node trains every round (Shoal's job waits for all its clients too); no
    # federated evaluation round (fraction_evaluate 0): the bench evaluates the global models.
    strategy = TimedFedAvg(timing, fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n,
                           min_available_nodes=n)
    if float(cfg.get("dp-noise", -1.0)) >= 0:
        strategy = DifferentialPrivacyServerSideFixedClipping(
            strategy, float(cfg["dp-noise"]), float(cfg["dp-clip"]), n)
    arrays = initial_arrays(mode, int(cfg["hidden"]), int(cfg["seed"]), str(cfg["init-npz"]))
    train_config = ConfigRecord({"lr": float(cfg["learning-rate"]),
                                 "local-epochs": int(cfg["local-epochs"]),
                                 "batch-size": int(cfg["batch-size"])})

    def save(server_round: int, record: ArrayRecord):
        if out_dir and mode == "train":
            np.savez(os.path.join(out_dir, f"global-{server_round}.npz"),
                     **{k: v.numpy() for k, v in record.items()})
        return None

    strategy.start(grid=grid, initial_arrays=arrays, num_rounds=rounds, timeout=3600,
                   train_config=train_config, evaluate_fn=save)
