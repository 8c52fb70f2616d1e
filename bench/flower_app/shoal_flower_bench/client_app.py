"""The ClientApp of bench-fl-flower --train: local epochs of SGD on this node's Fashion-MNIST
partition (bench/fl_flower_train.py's model, partition and loop), the trained weights back."""

from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    from .train import local_train

    cfg = context.run_config
    partition = int(context.node_config["partition-id"])
    config = msg.content["config"]
    global_arrays = {k: v.numpy() for k, v in msg.content["arrays"].items()}
    # Round r (FedAvg's "server-round", from 1) trains from global version r - 1, as Shoal's
    # clients train round r from version r - 1.
    state, n = local_train(global_arrays, partition, int(cfg["num-clients"]), int(cfg["seed"]),
                           float(cfg["alpha"]), int(config["local-epochs"]), float(config["lr"]),
                           int(config["batch-size"]), int(config["server-round"]) - 1)
    return Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in state.items()}),
                               "metrics": MetricRecord({"num-examples": n})}), reply_to=msg)
