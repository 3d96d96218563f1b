"""Batch predictions: every ONNX file (and transformers ``config.json``) under a directory or
``s3://`` prefix -> parquet rows.

One row per input file (schema :data:`SCHEMA`): ``status`` ``ok`` with the predictions, or
``error`` with the error code and one-line message; a bad file never fails the job. The driver
only lists paths; reading, featurizing and the ensemble run in a Ray Data actor pool (each actor
loads the predictor once). The driver streams the rows back and writes them to ``DST/*.parquet``
as they come, ``rows_per_file`` at a time, so a job that dies keeps what it finished; a re-run
skips the paths that already have a row for the same predictor version.
"""
from __future__ import annotations

import json
import math
import os
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa

from trappm_ray import storage
from trappm_ray.physics.collectives import with_gpus_per_node

_F, _S, _I = pa.float64(), pa.string(), pa.int64()
SCHEMA = pa.schema([
    ("path", _S), ("status", _S), ("error_code", _S), ("error", _S), ("model_version", _S),
    ("device", _S), ("compute", _S), ("batch_size", _I), ("model_sha256", _S),
    ("train_step_ms", _F), ("train_step_ms_low", _F), ("train_step_ms_high", _F),
    ("train_memory_mb", _F), ("train_memory_mb_low", _F), ("train_memory_mb_high", _F),
    ("inference_ms", _F), ("inference_ms_low", _F), ("inference_ms_high", _F),
    ("train_power_w", _F), ("train_power_w_low", _F), ("train_power_w_high", _F),
    ("throughput_samples_s", _F), ("smallest_profile", _S), ("nodes", _I), ("macs", _F),
    ("params", _F), ("seconds", _F),
])


@dataclass
class BatchPredictConfig:
    """Settings of :func:`run` (every field is a ``--flag`` of jobs/batch_predict.py).

    Args:
        src: directory or ``s3://`` prefix searched recursively for ``*.onnx``.
        dst: output directory or ``s3://`` prefix for the parquet files.
        predictor: predictor directory / URI; ``default`` = the shipped one.
        batch_size: batch size to predict for; resolution: value of symbolic spatial dims.
        actors: size of the actor pool.
        rows_per_batch: files per actor call (one ensemble pass).
        rows_per_file: rows per output parquet file, about (whole blocks are written as they come).
        max_file_mb: larger files become error rows without being read.
        ray_address: an existing cluster; None = ``RAY_ADDRESS`` or a private local one.
        num_cpus: CPUs of a local cluster (None = all).
        precision, optimizer, gpus, memory_format: the training setting predicted for (None:
            the predictor's default); one the predictor was never trained on fails the job
            before any file is read.
        recompute, grad_accum: activation checkpointing, passes per optimizer step (GPUs).
        device: predict for this device: its shipped predictor, else (a GPU of the spec table)
            the spec-based one; None = ``predictor``.
        power_limit_w: the GPU's power limit in W (None: its TDP).
        cluster: where ``gpus`` above 1 run (a ``data/clusters.csv`` name or JSON file).
        gpus_per_node: GPUs a node of ``cluster`` (or of the GPU's own) holds.
        dim: values of named symbolic input dims, ``seq=128`` or ``seq=128,heads=8`` (text models).
        parallel: the layout of every transformers ``config.json`` under ``src`` over ``gpus``
            (``tp=T,pp=P[,dp=D][,zero=Z]``, ``fsdp``, ``zero1``-``zero3``; ``batch_size`` the
            micro-batch), answered as the Python API's ``predict(config, parallel=...)``; an ONNX
            file names no blocks to lay out, so it gets an error row under such a layout.
    """

    src: str = ""
    dst: str = ""
    predictor: str = "default"
    batch_size: int = 1
    resolution: int | None = None
    actors: int = 1
    rows_per_batch: int = 4
    rows_per_file: int = 1000
    max_file_mb: float = 2048.0
    ray_address: str | None = None
    num_cpus: int | None = None
    precision: str | None = None
    optimizer: str | None = None
    gpus: int | None = None
    memory_format: str | None = None
    recompute: bool | None = None
    grad_accum: int | None = None
    device: str | None = None
    power_limit_w: float | None = None
    cluster: str | None = None
    gpus_per_node: int | None = None
    global_batch: int | None = None
    dim: str | None = None
    parallel: str | None = None

    def setting(self) -> dict:
        """The options every file is predicted with (``PredictOptions`` fields beside the batch)."""
        out = {k: getattr(self, k) for k in ("precision", "optimizer", "gpus", "memory_format", "recompute",
                                             "grad_accum", "device", "power_limit_w", "global_batch")}
        out["cluster"] = with_gpus_per_node(self.cluster, self.gpus_per_node)
        try:
            dims = dict(item.split("=", 1) for item in (self.dim or "").split(",") if item)
            out["dims"] = tuple(sorted((k.strip(), int(v)) for k, v in dims.items()))
        except ValueError:
            raise ValueError(f"--dim takes NAME=N[,NAME=N], got {self.dim!r}") from None
        return out


@dataclass
class BatchSummary:
    files: int
    skipped: int
    predicted: int
    ok: int
    errors: int
    dst: str
    model_version: str
    seconds: float


def is_model(name: str) -> bool:
    """An ONNX file or a transformers config (``config.json``)."""
    return name.lower().endswith(".onnx") or os.path.basename(name) == "config.json"


def list_models(src: str) -> list[str]:
    """Every ``*.onnx`` and ``config.json`` under ``src`` (recursive), as full paths / URIs, sorted."""
    if storage.is_remote(src):
        fs, path = storage.fs_and_path(src)
        scheme = src.split("://", 1)[0] + "://"
        return sorted(scheme + p for p in fs.find(path) if is_model(p))
    if not os.path.isdir(src):
        raise FileNotFoundError(f"{src} is not a directory")
    src = os.path.abspath(src)  # actors may run elsewhere than the driver's cwd
    return sorted(os.path.join(d, f) for d, _, names in os.walk(src) for f in names if is_model(f))


def done_paths(dst: str, model_version: str) -> set[str]:
    """Paths that already have a row for ``model_version`` under ``dst``."""
    done: set[str] = set()
    for uri in storage.listdir(dst, ".parquet"):
        t = storage.read_table(uri, columns=["path", "model_version"]).to_pydict()
        done.update(p for p, v in zip(t["path"], t["model_version"]) if v == model_version)
    return done


def error_row(path: str, code: str, message: str, version: str, device: str) -> dict:
    return {"path": path, "status": "error", "error_code": code, "error": message[:500],
            "model_version": version, "device": device}


class StorageUnavailable(RuntimeError):
    """Reading an input failed for the storage's sake, not the file's: the job stops."""


class BatchStopped(RuntimeError):
    """The job stopped part-way (storage gone, a worker lost); what it wrote is kept."""


class PredictActor:
    """Holds one predictor; maps a batch of paths to rows (callable class for ``map_batches``)."""

    def __init__(self, predictor: str, batch_size: int, resolution: int | None,
                 max_file_bytes: int, setting: dict | None = None, parallel: str | None = None):
        from trappm_ray.serving.api import device_of, load_predictor, model_version

        setting = setting or {}
        self.predictor = load_predictor(predictor, setting.get("device"))
        self.compute = "cpu"  # every estimator runs on the CPU (networks in NumPy, boosters)
        self.opts = file_options(batch_size, resolution, setting, parallel)
        # a config.json is answered as predict(config, ...) answers it (layouts included)
        self.config_kw = {**{k: v for k, v in setting.items() if k not in ("device", "dims")},
                          "batch_size": batch_size, "dims": dict(setting.get("dims") or ()), "parallel": parallel}
        self.version = model_version(self.predictor)
        self.device = str(device_of(self.predictor).get("slug", ""))
        self.max_file_bytes = max_file_bytes

    def _read(self, path: str) -> bytes:
        from trappm_ray import errors

        fs, p = storage.fs_and_path(path)
        if fs.size(p) > self.max_file_bytes:
            raise errors.TooLarge(f"file exceeds {self.max_file_bytes:,} bytes")
        return storage.read_bytes(path)

    def __call__(self, batch: pa.Table) -> pa.Table:
        from trappm_ray import errors
        from trappm_ray.serving.api import predict_many

        start = time.perf_counter()
        rows: dict[str, dict] = {}
        items = []
        configs = []
        for path in batch.column("path").to_pylist():
            try:
                if path.endswith(".json"):
                    configs.append((path, self._read(path)))
                elif self.opts is None:
                    raise errors.NotAModel("a tensor or pipeline layout is answered for a transformers "
                                           "config (config.json), not an ONNX file")
                else:
                    items.append((self._read(path), self.opts, path))
            except errors.ModelError as e:
                rows[path] = error_row(path, e.code, str(e), self.version, self.device)
            except (FileNotFoundError, PermissionError, IsADirectoryError) as e:
                # the file's own fault (gone since the listing, forbidden): an error row
                rows[path] = error_row(path, "read_error", f"{e.__class__.__name__}: {e}",
                                       self.version, self.device)
            except Exception as e:  # noqa: BLE001 - the storage's fault, not the file's
                # An unreachable S3 endpoint must fail the job, not become an error row: a row
                # is permanent (re-runs skip its path), so a brief outage would lose predictions.
                raise StorageUnavailable(f"cannot read {path}: {e.__class__.__name__}: "
                                         f"{str(e).splitlines()[0][:300] if str(e) else ''}"
                                         ) from None
        for (_, _, path), r in zip(items, predict_many(items, self.predictor)):
            rows[path] = (error_row(path, r.code, str(r), self.version, self.device)
                          if isinstance(r, errors.ModelError) else self._row(path, r))
        rows.update((path, self._config_row(path, data)) for path, data in configs)
        per_file = (time.perf_counter() - start) / max(len(rows), 1)
        ordered = [{**rows[p], "compute": self.compute, "seconds": per_file}
                   for p in batch.column("path").to_pylist()]
        return pa.Table.from_pylist(ordered, schema=SCHEMA)

    def _config_row(self, path: str, data: bytes) -> dict:
        """A ``config.json``'s row: its prediction, or its error row (a bad file never stops the job)."""
        from trappm_ray import errors
        from trappm_ray.serving.api import predict

        try:
            config = json.loads(data)
            if not isinstance(config, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as e:
            return error_row(path, "not_a_model", f"config.json does not parse as a JSON object: {e}",
                             self.version, self.device)
        try:
            return self._row(path, predict(config, predictor=self.predictor, **self.config_kw))
        except errors.ModelError as e:
            return error_row(path, e.code, str(e), self.version, self.device)
        except Exception as e:  # noqa: BLE001 - a bug answers one error row, the job goes on
            return error_row(path, "internal", e.__class__.__name__, self.version, self.device)

    def _row(self, path: str, r) -> dict:
        """A prediction's row."""
        from trappm_ray.targets import REPORTED

        row = {"path": path, "status": "ok", "model_version": self.version, "device": self.device,
               "batch_size": r.batch_size, "model_sha256": r.model_sha256, "throughput_samples_s": r.throughput_samples_s,
               "smallest_profile": r.smallest_profile, **{k: r.graph.get(k) for k in ("nodes", "macs", "params")}}
        for t in REPORTED:
            if (e := getattr(r, t)) is not None:
                row.update({t: e.value, f"{t}_low": e.low, f"{t}_high": e.high})
        return row


def file_options(batch_size: int, resolution: int | None, setting: dict, parallel: str | None):
    """The options every ONNX file is predicted with (ZeRO over data parallelism included); None
    under a tensor or pipeline layout (it lays out configs only, and its global batch divides by
    the data-parallel replicas)."""
    from trappm_ray.serving.api import PredictOptions
    from trappm_ray.serving.plan import data_parallel_zero

    zero = data_parallel_zero(parallel, setting.get("gpus"))
    return None if zero is None else PredictOptions(batch_size, resolution, **setting, zero=zero)


def _grouped(tables, rows: int):
    """Consecutive ``tables`` concatenated into tables of at least ``rows`` rows (the last: less)."""
    pending: list[pa.Table] = []
    for t in tables:
        pending.append(t)
        if sum(p.num_rows for p in pending) >= rows:
            yield pa.concat_tables(pending)
            pending = []
    if pending:
        yield pa.concat_tables(pending)


def _cause(e: BaseException) -> str:
    """``Class: message`` of what stopped the job. A reading actor's :class:`StorageUnavailable`
    reaches the driver as text inside Ray Data's ``UserCodeException``: it is found there."""
    chain: list[BaseException] = []
    while isinstance(e, BaseException) and all(e is not c for c in chain):
        chain.append(e)
        e = getattr(e, "cause", None) or e.__cause__
    for exc in chain:
        for line in str(exc).splitlines():
            if "StorageUnavailable: " in line:
                return "StorageUnavailable: " + line.split("StorageUnavailable: ", 1)[1][:400]
    text = [line for line in str(chain[-1]).splitlines() if line.strip()]
    return f"{chain[-1].__class__.__name__}: {text[-1][:300] if text else ''}"


def run(cfg: BatchPredictConfig) -> BatchSummary:
    """Predict every ONNX file and ``config.json`` under ``cfg.src`` not yet in ``cfg.dst``; write parquet rows.

    Raises:
        FileNotFoundError: ``src`` is not a directory; PredictorError: no predictor;
        errors.UnsupportedOption: a setting the predictor was never trained on;
        BatchStopped: the storage (or a worker) failed mid-job; the rows written so far are
        kept and a re-run predicts the rest.
    """
    from trappm_ray.ray_init import ensure_ray
    from trappm_ray.serving.answering import requested_setting
    from trappm_ray.serving.api import load_predictor, model_version
    from trappm_ray.serving.routing import settled

    start = time.perf_counter()
    if not cfg.src or not cfg.dst:
        raise ValueError("src and dst are required")
    predictor = load_predictor(cfg.predictor, cfg.device)  # fails early, before Ray starts
    opts = file_options(cfg.batch_size, cfg.resolution, cfg.setting(), cfg.parallel)  # a bad layout fails here
    if opts is not None:
        settled(requested_setting(opts, predictor), predictor)  # fails here, not per file
    version = model_version(predictor)
    files = list_models(cfg.src)
    done = done_paths(cfg.dst, version)
    todo = [f for f in files if f not in done]
    summary = BatchSummary(len(files), len(files) - len(todo), len(todo), 0, 0, cfg.dst, version, 0.0)
    if todo:
        ensure_ray(cfg.ray_address, cfg.num_cpus)
        import ray

        # A few blocks per actor balance the pool; one block per batch would pay Ray Data's
        # per-task overhead (measured: most of the job's time) for every few files.
        blocks = max(1, min(math.ceil(len(todo) / cfg.rows_per_batch), 4 * cfg.actors))
        ds = ray.data.from_items([{"path": f} for f in todo], override_num_blocks=blocks)
        ds = ds.map_batches(
            PredictActor, batch_size=cfg.rows_per_batch, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=cfg.actors),
            fn_constructor_kwargs=dict(predictor=cfg.predictor, batch_size=cfg.batch_size,
                                       resolution=cfg.resolution,
                                       max_file_bytes=int(cfg.max_file_mb * 2**20),
                                       setting=cfg.setting(), parallel=cfg.parallel),
            num_cpus=1)
        # One streaming pass: a separate write_parquet over a materialized dataset was a second
        # Ray Data job (2 actors: 8.6 s fixed cost per run before, 5.8 s now; docs/predict.md)
        # and wrote nothing until the end.
        run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        outputs = ds.iter_batches(batch_size=None, batch_format="pyarrow")
        try:
            for part, table in enumerate(_grouped(outputs, cfg.rows_per_file)):
                storage.write_table(table, storage.join(cfg.dst,
                                                        f"part-{run_id}-{part:05d}.parquet"))
                status = table.column("status").to_pylist()
                summary.ok += status.count("ok")
                summary.errors += status.count("error")
        except Exception as e:  # noqa: BLE001 - one line that says what happened and what to do
            done_now = summary.ok + summary.errors
            raise BatchStopped(
                f"batch job stopped: {_cause(e)}; {done_now} of {len(todo)} rows were written "
                f"to {cfg.dst} before it and are kept; run the same command again to predict "
                f"the other {len(todo) - done_now}") from None
    summary.seconds = time.perf_counter() - start
    return summary


__all__ = ["SCHEMA", "BatchPredictConfig", "BatchSummary", "PredictActor", "StorageUnavailable",
           "BatchStopped", "is_model", "list_models", "file_options", "done_paths", "run"]
