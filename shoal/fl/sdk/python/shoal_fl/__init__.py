"""shoal_fl: the Python client SDK for Shoal's federated-learning jobs.

    import shoal_fl

    class MyClient(shoal_fl.Client):
        def fit(self, parameters, config): ...       # -> (parameters, num_examples, metrics)
        def evaluate(self, parameters, config): ...  # -> (loss, num_examples, {"accuracy": a})

    shoal_fl.run_client("http://localhost:8080", "fmnist", MyClient(), token=FL_TOKEN)

JobClient speaks the protocol request by request; update_format writes SHU1 bodies;
shoal_fl.torch (optional) moves parameters in and out of a torch.nn.Module; attacks poisons
updates for experiments with a job's robust rule; LocalDP clips and noises each update on the
client before it is sent (local differential privacy, run_client(local_dp=...)).
"""

from .attacks import Attack, Collusion, flip_labels, lie_z, little_is_enough, parse_attack
from .client import Client, NumPyClient
from .dtypes import DType
from .errors import (BadRequest, ConnectionFailed, Forbidden, HttpError, NotFound,
                     PayloadTooLarge, ProtocolError, ServerError, ServiceUnavailable, ShoalError,
                     StaleUpdate, Unauthorized)
from .local_dp import LocalDP, privatize
from .job_client import GlobalModel, JobClient, Membership, RetryPolicy, Task
from .runner import run_client, RunSummary
from .update_format import EncodedUpdate, UpdateKind, UpdateMeta

__version__ = "0.1.0"

__all__ = [
    "Attack", "BadRequest", "Client", "Collusion", "ConnectionFailed", "DType", "EncodedUpdate",
    "Forbidden", "GlobalModel", "HttpError", "JobClient", "LocalDP", "Membership", "NotFound", "NumPyClient",
    "PayloadTooLarge", "ProtocolError", "RetryPolicy", "RunSummary", "ServerError",
    "ServiceUnavailable", "ShoalError", "StaleUpdate", "Task", "Unauthorized", "UpdateKind",
    "UpdateMeta", "flip_labels", "lie_z", "little_is_enough", "parse_attack", "privatize",
    "run_client",
]
