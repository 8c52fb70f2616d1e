"""The ClientApp, as Flower's PyTorch quickstart writes one: train and evaluate messages, the
model's state dict in an ArrayRecord, `num-examples` in the MetricRecord."""

import os

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .task import Net, evaluate, train

app = ClientApp()


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    cfg = context.run_config
    net = Net(int(cfg["hidden"]))
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    config = msg.content["config"]
    server_round = int(config["server-round"])
    pid = int(context.node_config["partition-id"])
    parts = int(context.node_config["num-partitions"])
    loss, n = train(net, pid, parts, int(cfg["seed"]), server_round, int(cfg["train-samples"]),
                    int(cfg["local-epochs"]), int(cfg["batch-size"]), float(config["lr"]))
    arrays = ArrayRecord(net.state_dict())
    if cfg["dump-dir"]:
        # The reply as sent, for the test's FedAvg check.
        np.savez(os.path.join(str(cfg["dump-dir"]), f"reply-r{server_round}-p{pid}.npz"),
                 num_examples=n, **{k: v.numpy() for k, v in arrays.items()})
    return Message(RecordDict({"arrays": arrays,
                               "metrics": MetricRecord({"train_loss": loss, "num-examples": n})}),
                   reply_to=msg)


@app.evaluate()
def evaluate_fn(msg: Message, context: Context) -> Message:
    cfg = context.run_config
    net = Net(int(cfg["hidden"]))
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    loss, acc, n = evaluate(net, int(cfg["eval-samples"]))
    return Message(RecordDict({"metrics": MetricRecord({"eval_loss": loss, "eval_acc": acc,
                                                        "num-examples": n})}), reply_to=msg)
