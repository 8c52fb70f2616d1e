"""The Flower-like client interface: subclass Client, implement fit (and evaluate), and hand it
to run_client. The signatures are Flower's NumPyClient's, so a Flower client ports by changing
its base class and its start call."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple, Union

import numpy as np

# What fit() and evaluate() take and return (Flower's NumPyClient types, with config's
# parameter_names a list of str).
Parameters = List[np.ndarray]
Config = Dict[str, Any]
Scalar = Union[bool, bytes, float, int, str]
Metrics = Mapping[str, Scalar]


class Client:
    """`parameters` are float32 numpy arrays in the model's tensor order (the server's names are
    in config["parameter_names"]). fit() returns arrays of the same shapes in the same order.

    config for fit() and evaluate():
      job, client_id, model_version   which job, who, and the global version `parameters` hold
      parameter_names                 the tensor names, in order
    fit() only:
      local_steps      the SGD steps to run: FedCompass assigns each client its own number
                       from its measured speed, so train exactly this many (report another
                       count as metrics["local_steps"] if you must)
      learning_rate, batch_size       the job's spec.training
    """

    def fit(self, parameters: Parameters, config: Config) -> Tuple[Parameters, int, Metrics]:
        """Train from `parameters`; return (new parameters, training examples, metrics)."""
        raise NotImplementedError("a Client must implement fit(parameters, config)")

    def evaluate(self, parameters: Parameters,
                 config: Config) -> "Tuple[float, int, Metrics] | None":
        """Score `parameters` on local test data: (loss, examples, {"accuracy": a, ...}).
        The runner reports loss and metrics["accuracy"] to the job. Returning None (the
        default) reports nothing."""
        return None


# Flower's name for the same interface.
NumPyClient = Client
