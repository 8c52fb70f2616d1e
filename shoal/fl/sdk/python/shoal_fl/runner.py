"""run_client: one FL client's whole life in a job. Join, then loop: ask for a task, fetch the
global version it names (once per version), fit, push the update, evaluate that version; stop
when the job says done."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .client import Client, Metrics, Parameters
from .dtypes import DType
from .errors import NotFound, StaleUpdate
from .job_client import GlobalModel, JobClient, RetryPolicy
from .local_dp import LocalDP

log = logging.getLogger("shoal_fl")


@dataclasses.dataclass
class RunSummary:
    client_id: str = ""
    done: bool = False  # the job said done (False: max_seconds ran out)
    tasks: int = 0  # train tasks fitted
    assigned_steps: List[int] = dataclasses.field(default_factory=list)  # local_steps of each task
    accepted_steps: List[int] = dataclasses.field(default_factory=list)  # steps of each update taken
    updates_accepted: int = 0
    updates_stale: int = 0  # 409: too stale or a duplicate
    model_downloads: int = 0
    # version -> (loss, accuracy)
    evaluations: Dict[int, Tuple[float, float]] = dataclasses.field(default_factory=dict)
    last_version: int = 0
    retries: int = 0  # requests retried after 503/429/no answer
    seconds: float = 0.0


def _check_fit_result(result: object, model: GlobalModel) -> Tuple[Parameters, int, Metrics]:
    if not isinstance(result, tuple) or len(result) != 3:
        raise TypeError("fit() must return (parameters, num_examples, metrics)")
    params, num_examples, metrics = result
    if len(params) != len(model.arrays):
        raise ValueError(f"fit() returned {len(params)} arrays, the model has "
                         f"{len(model.arrays)}: {model.names}")
    for name, got, want in zip(model.names, params, model.arrays):
        if tuple(np.shape(got)) != want.shape:
            raise ValueError(f"fit() returned shape {list(np.shape(got))} for tensor '{name}', "
                             f"the model's is {list(want.shape)} (is the order the model's?)")
    if int(num_examples) <= 0:
        raise ValueError("fit() must return num_examples > 0 (the update's weight)")
    return params, int(num_examples), dict(metrics or {})


def run_client(server: str, job: str, client: Client, *, token: Optional[str] = None,
               name: str = "", join_token: Optional[str] = None,
               dtype: "DType | str" = DType.F32, evaluate: bool = True,
               evaluate_final: bool = True, max_seconds: Optional[float] = None,
               retry: Optional[RetryPolicy] = None, timeout: float = 120.0,
               local_dp: Optional[LocalDP] = None) -> RunSummary:
    """Runs `client` in FL job `job` on shoald at `server` (the public port,
    "http://host:8080") until the job is done (or max_seconds pass); returns what it did.

    token: the bearer token (an fl-client token of the job), $SHOAL_TOKEN when None.
    dtype: the updates' wire type, "f32", "bf16", "f16" (halve the bytes), "int8" or "int4"
        (block-quantized: about 1/4 and 1/7 of f32; the job must list them in
        spec.aggregation.wireFormats).
    evaluate: call client.evaluate on each global version this client trained from and report
      it; evaluate_final: also the job's last version when it is done.
    local_dp: clip each update's change from the global model and add Gaussian noise on this
      client before sending it (shoal_fl.LocalDP: local differential privacy; off by default).
    Raises the SDK's errors (errors.py) for what retrying cannot fix: a bad token, an unknown
    job, an update the server refuses (BadRequest with its reason).
    """
    t0 = time.monotonic()
    dtype = DType.parse(dtype)
    s = RunSummary()
    with JobClient(server, job, token, retry=retry, timeout=timeout) as jc:
        member = jc.join(name, join_token)
        s.client_id = member.client_id
        log.info("%s joined %s as %s", name or "client", job, member.client_id)
        model: Optional[GlobalModel] = None

        def fetch(version: Optional[int]) -> GlobalModel:
            m = jc.model(version)
            s.model_downloads += 1
            return m

        def run_evaluate(m: GlobalModel) -> None:
            config = {"job": job, "client_id": member.client_id, "model_version": m.version,
                      "parameter_names": list(m.names)}
            result = client.evaluate([a.copy() for a in m.arrays], config)
            if result is None:
                return
            loss, num_examples, metrics = result
            if "accuracy" not in (metrics or {}):
                raise ValueError("evaluate() must return metrics with an 'accuracy' entry "
                                 "(the job records accuracy and loss per version)")
            accuracy = float(metrics["accuracy"])
            s.evaluations[m.version] = (float(loss), accuracy)
            try:
                jc.report_eval(member, m.version, accuracy, float(loss), int(num_examples))
            except NotFound as e:  # a version the job no longer keeps
                log.warning("%s: eval report for version %d: %s", member.client_id, m.version, e)

        while True:
            if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                break
            task = jc.task(member)
            if task.kind == "done":
                s.done = True
                break
            if task.kind == "wait":
                time.sleep(max(task.retry_after_ms, 10) / 1000)
                continue
            if model is None or model.version != task.model_version:
                try:
                    model = fetch(task.model_version)
                except NotFound:
                    model = None  # no longer kept: ask for a new task
                    continue
            s.last_version = max(s.last_version, model.version)
            config = {"job": job, "client_id": member.client_id,
                      "model_version": task.model_version, "local_steps": task.local_steps,
                      "learning_rate": task.learning_rate, "batch_size": task.batch_size,
                      "parameter_names": list(model.names)}
            start = time.monotonic()
            params, num_examples, metrics = _check_fit_result(
                client.fit([a.copy() for a in model.arrays], config), model)
            train_seconds = time.monotonic() - start
            if local_dp is not None:
                params = local_dp.privatize(model.arrays, params)[0]
            s.tasks += 1
            s.assigned_steps.append(task.local_steps)
            steps = int(metrics.get("local_steps", task.local_steps))
            try:
                jc.push_update(member, task.model_version, model.names, params, num_examples,
                               local_steps=steps, train_seconds=train_seconds, dtype=dtype)
                s.updates_accepted += 1
                s.accepted_steps.append(steps)
            except StaleUpdate as e:
                s.updates_stale += 1
                log.info("%s: update from version %d not taken: %s", member.client_id,
                         task.model_version, e.message)
            if evaluate and model.version not in s.evaluations:
                run_evaluate(model)

        if s.done and evaluate and evaluate_final:
            try:
                version = int(jc.status().get("version", 0))
                s.last_version = max(s.last_version, version)
                if version not in s.evaluations:
                    run_evaluate(model if model is not None and model.version == version
                                 else fetch(version))
            except NotFound as e:
                log.warning("%s: final model: %s", member.client_id, e)
        s.retries = jc.retries
    s.seconds = time.monotonic() - t0
    return s
