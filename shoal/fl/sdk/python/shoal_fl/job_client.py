"""The client side of shoald's FL job protocol, /v1/jobs/{job}/...: join, task, model download,
update upload, evaluation report and job status (the Python twin of
shoal/fl/client/fl_http_client.h).

One JobClient per thread: it keeps one HTTP/1.1 connection alive between requests. Every
request carries `Authorization: Bearer <token>` (an fl-client token of the job, from
`shoal token create --role fl-client --job JOB`; $SHOAL_TOKEN by default). 503 and 429 (pool or
queue full), 502, 504 and requests that got no answer are retried with exponential back-off,
waiting what the server's Retry-After asks for when it sends one; other errors raise at once
with the server's message (errors.py).
"""

from __future__ import annotations

import dataclasses
import email.utils
import http.client
import json
import os
import random
import socket
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import safetensors
from .dtypes import DType
from .errors import ConnectionFailed, error_for_status, ProtocolError
from .update_format import EncodedUpdate, UpdateKind, UpdateMeta

_RETRYABLE_STATUS = {429, 502, 503, 504}
# A request body, and a 2xx reply: (status, headers with lower-case names, body).
_Body = Union[bytes, EncodedUpdate, None]
_Reply = Tuple[int, Dict[str, str], bytearray]


@dataclasses.dataclass
class RetryPolicy:
    """Exponential back-off: the n-th retry waits initial_delay * multiplier**(n-1), at most
    max_delay, with +-`jitter` of it at random; a Retry-After from the server replaces that
    delay (capped at max_retry_after). A request is tried at most `attempts` times."""

    attempts: int = 8
    initial_delay: float = 0.1
    multiplier: float = 2.0
    max_delay: float = 5.0
    jitter: float = 0.1
    max_retry_after: float = 60.0

    def backoff(self, retry: int) -> float:
        d = min(self.max_delay, self.initial_delay * self.multiplier ** (retry - 1))
        return d * (1 + self.jitter * (2 * random.random() - 1)) if self.jitter else d


@dataclasses.dataclass(frozen=True)
class Membership:
    """What a join returns: the client's id and its per-client token (not the bearer token)."""

    client_id: str
    token: str


@dataclasses.dataclass(frozen=True)
class Task:
    """GET /task: kind "train" (train local_steps steps from model_version), "wait" (ask again
    after retry_after_ms) or "done"."""

    kind: str
    model_version: int = 0
    local_steps: int = 0
    learning_rate: float = 0.0
    batch_size: int = 0
    retry_after_ms: int = 0


@dataclasses.dataclass
class GlobalModel:
    """A global model version: tensor names and float32 arrays in the model's order."""

    version: int
    names: List[str]
    arrays: List[np.ndarray]
    metadata: Dict[str, Any]

    def state_dict(self) -> Dict[str, np.ndarray]:
        return dict(zip(self.names, self.arrays))


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a Retry-After header: delta-seconds (a float is taken too) or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_message(body: bytes | bytearray) -> str:
    """The server's {"error": "..."} message, or the start of the body when it is not that."""
    try:
        j = json.loads(body)
        message = j.get("error") if isinstance(j, dict) else None
        if isinstance(message, str):
            return message
    except ValueError:
        pass
    text = body[:200].decode("utf-8", "replace").strip()
    return text or "(no message)"


class JobClient:
    def __init__(self, server: str, job: str, token: Optional[str] = None, *,
                 timeout: float = 120.0, retry: Optional[RetryPolicy] = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        url = urllib.parse.urlsplit(server if "://" in server else "http://" + server)
        if url.scheme not in ("http", "https"):
            raise ValueError(f"server {server!r}: the scheme must be http or https")
        self.server = f"{url.scheme}://{url.netloc}{url.path.rstrip('/')}"
        self.job = job
        self.token = token if token is not None else os.environ.get("SHOAL_TOKEN", "")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.retries = 0  # requests retried so far (all kinds)
        self._sleep = sleep
        self._scheme, self._netloc = url.scheme, url.netloc
        self._base = url.path.rstrip("/") + "/v1/jobs/" + urllib.parse.quote(job, safe="")
        self._conn: Optional[http.client.HTTPConnection] = None

    # ---- the protocol ---------------------------------------------------------------------------

    def status(self) -> Dict[str, Any]:
        """GET /v1/jobs/{job}: state ("running", "done"), version, versions with accuracy, ..."""
        return self._json("GET", self._base)

    def join(self, name: str = "", join_token: Optional[str] = None) -> Membership:
        """POST /v1/jobs/{job}/join. `join_token` is one of the job's spec.clients.tokens."""
        req = {"name": name}
        if join_token:
            req["token"] = join_token
        j = self._json("POST", self._base + "/join", json.dumps(req).encode())
        if not isinstance(j.get("client_id"), str):
            raise ProtocolError("POST /join: the reply has no client_id")
        return Membership(j["client_id"], j.get("token", ""))

    def task(self, member: Membership) -> Task:
        """GET /v1/jobs/{job}/task?client=ID&token=T."""
        q = urllib.parse.urlencode({"client": member.client_id, "token": member.token})
        path = f"{self._base}/task?{q}"
        j = self._json("GET", path)
        kind = j.get("kind")
        if kind == "train":
            t = Task("train", int(j.get("model_version", 0)), int(j.get("local_steps", 0)),
                     float(j.get("learning_rate", 0.0)), int(j.get("batch_size", 0)))
            if t.local_steps <= 0 or t.batch_size <= 0 or not t.learning_rate > 0:
                raise ProtocolError("task: a train task needs local_steps, batch_size and "
                                    f"learning_rate > 0, got {j}")
            return t
        if kind == "wait":
            return Task("wait", retry_after_ms=int(j.get("retry_after_ms", 500)))
        if kind == "done":
            return Task("done")
        raise ProtocolError(f"task: unknown kind {kind!r}")

    def model(self, version: Optional[int] = None) -> GlobalModel:
        """GET /v1/jobs/{job}/model[?version=N]: the global model, decoded."""
        path = self._base + "/model" + ("" if version is None else f"?version={int(version)}")
        status, headers, body = self._request("GET", path)
        names, arrays, metadata = safetensors.load(body)
        v = headers.get("x-shoal-model-version")
        return GlobalModel(int(v) if v is not None else int(version or 0), names, arrays, metadata)

    def push_update(self, member: Membership, base_version: int, names: Sequence[str],
                    arrays: Sequence[np.ndarray], num_samples: int, *, local_steps: int = 0,
                    train_seconds: float = 0.0, dtype: "DType | str" = DType.F32,
                    kind: UpdateKind = UpdateKind.WEIGHTS) -> Dict[str, Any]:
        """POST /v1/jobs/{job}/updates: the tensors (in the model's order) as an SHU1 body,
        streamed tensor by tensor with a Content-Length. Returns the 202's JSON (or {}).
        Raises StaleUpdate on 409, BadRequest with the server's reason on 400."""
        meta = UpdateMeta(self.job, member.client_id, member.token, int(base_version),
                          int(num_samples), int(local_steps), float(train_seconds), kind)
        body = EncodedUpdate(meta, names, arrays, dtype)
        _, _, reply = self._request("POST", self._base + "/updates", body,
                                    "application/octet-stream")
        try:
            j = json.loads(reply) if reply else {}
            return j if isinstance(j, dict) else {"reply": j}
        except ValueError:
            return {"reply": reply.decode("utf-8", "replace")}

    def report_eval(self, member: Membership, version: int, accuracy: float, loss: float,
                    num_samples: int = 0) -> None:
        """POST /v1/jobs/{job}/eval: this client's accuracy and loss of a global version."""
        req = {"client_id": member.client_id, "token": member.token, "version": int(version),
               "accuracy": float(accuracy), "loss": float(loss), "samples": int(num_samples)}
        self._json("POST", self._base + "/eval", json.dumps(req).encode())

    def secagg_state(self, member: Membership, round_id: int = 0) -> Dict[str, Any]:
        """GET /v1/jobs/{job}/secagg: this client's view of a secure-aggregation round (0: the
        latest): its stage, and from the share stage on its neighbours' keys and its shares."""
        q = urllib.parse.urlencode({"client": member.client_id, "token": member.token,
                                    "round": int(round_id)})
        return self._json("GET", f"{self._base}/secagg?{q}")

    def secagg_post(self, step: str, body: Dict[str, Any]) -> Dict[str, Any]:
        """POST /v1/jobs/{job}/secagg/{advertise,shares,unmask} (secagg.py builds the bodies)."""
        return self._json("POST", f"{self._base}/secagg/{step}", json.dumps(body).encode())

    # ---- HTTP ----------------------------------------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "JobClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _json(self, method: str, path: str, body: Optional[bytes] = None) -> Dict[str, Any]:
        _, _, reply = self._request(method, path, body,
                                    "application/json" if body is not None else None)
        try:
            j = json.loads(reply)
        except ValueError:
            raise ProtocolError(f"{method} {path.split('?')[0]}: the reply is not JSON: "
                                f"{bytes(reply[:100])!r}") from None
        if not isinstance(j, dict):
            raise ProtocolError(f"{method} {path.split('?')[0]}: the reply is not a JSON object")
        return j

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = (http.client.HTTPSConnection if self._scheme == "https"
                   else http.client.HTTPConnection)
            self._conn = cls(self._netloc, timeout=self.timeout)
            self._conn.connect()
            # The head and each chunk of a body are separate writes: without TCP_NODELAY,
            # Nagle's algorithm and the peer's delayed ACK hold each request ~40 ms.
            self._conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._conn

    def _request(self, method: str, path: str, body: _Body = None,
                 content_type: Optional[str] = None) -> _Reply:
        """(status, headers with lower-case names, body bytes) of a 2xx; retries what is worth
        retrying, raises the rest."""
        retry = 0
        while True:
            reused = self._conn is not None
            try:
                status, headers, reply = self._once(method, path, body, content_type)
            except ConnectionFailed:
                if reused:
                    continue  # the server closed the idle kept-alive connection: a new one
                retry += 1
                if retry >= self.retry.attempts:
                    raise
                self.retries += 1
                self._sleep(self.retry.backoff(retry))
                continue
            if status < 400:
                return status, headers, reply
            message = _server_message(reply)
            retry_after = parse_retry_after(headers.get("retry-after"))
            if retry_after is None and status in (429, 503):
                try:  # the C++ client also takes {"retry_after_ms": N}
                    ms = json.loads(reply).get("retry_after_ms")
                    retry_after = float(ms) / 1000 if isinstance(ms, (int, float)) else None
                except (ValueError, AttributeError):
                    pass
            err = error_for_status(status, message, method, path.split("?")[0], retry_after)
            if status not in _RETRYABLE_STATUS:
                raise err
            retry += 1
            if retry >= self.retry.attempts:
                raise err
            self.retries += 1
            delay = (min(retry_after, self.retry.max_retry_after) if retry_after is not None
                     else self.retry.backoff(retry))
            self._sleep(delay)

    def _once(self, method: str, path: str, body: _Body, content_type: Optional[str]) -> _Reply:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if content_type:
            headers["Content-Type"] = content_type
        if body is not None:
            headers["Content-Length"] = str(len(body))
        try:
            conn = self._connection()
            try:
                # An EncodedUpdate is iterated chunk by chunk: http.client sends each as it comes.
                conn.request(method, path, body=body, headers=headers, encode_chunked=False)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer (413, 503) and close before it read the whole body:
                # its answer is still there to read.
                pass
            resp = conn.getresponse()
            length = resp.getheader("Content-Length")
            if length is not None and int(length) > 0:
                reply = bytearray(int(length))  # writable: float32 tensors are views into it
                view, got = memoryview(reply), 0
                while got < len(reply):
                    n = resp.readinto(view[got:])
                    if not n:
                        raise http.client.IncompleteRead(bytes(reply[:got]), len(reply) - got)
                    got += n
            else:
                reply = bytearray(resp.read())
            if resp.will_close:
                self.close()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, reply
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise ConnectionFailed(f"cannot reach shoald at {self.server}: {method} "
                                   f"{path.split('?')[0]}: {type(e).__name__}: {e}") from e
