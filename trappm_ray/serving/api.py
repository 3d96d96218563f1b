"""One model in, its predicted training cost out: the API behind ``trappm_ray.predict``.

    >>> import trappm_ray
    >>> p = trappm_ray.predict("resnet101.onnx", batch_size=32, memory_budget_mb=8000)
    >>> p.train_step_ms.value, p.train_step_ms.low, p.smallest_profile, p.max_batch_size

Every estimate is the mean of the predictor's seed ensemble with an interval of
``mean +- interval_z * std`` over the seeds: it shows how much the seeds disagree, not the
measurement noise of the labels. Results name the predictor's device (from its manifest); a CPU
predictor predicts CPU costs, and the GPU/MIG fit then only applies its memory to GPU profiles.
``device=`` picks a shipped predictor, else for any other GPU (a spec-table row, or a user's
``device_spec`` file) the spec-based one (:mod:`trappm_ray.serving.routing`), whose intervals are
split-conformal on its leave-one-device-out errors rather than the seeds' spread.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace

import onnx

from trappm_ray import errors
from trappm_ray.devices import DeviceSpec
from trappm_ray.graph.featurize import Graph
from trappm_ray.model.options import resolve as resolve_options, step_fields
from trappm_ray.model.compositions import SettingMove, held_at
from trappm_ray.model.estimator import Estimator, device_of, model_version
from trappm_ray.model import launch
from trappm_ray.physics.floors import gpu_memory_mb, memory_floor_mb
from trappm_ray.physics.roofline import runs_as
from trappm_ray.serving.answering import Answered, answer_rows, requested_setting, time_floors
from trappm_ray.serving.checks import absurdities, domain_of
from trappm_ray.serving.layers import breakdown
from trappm_ray.serving.model_input import model_bytes
from trappm_ray.serving.passes import with_data_parallel, with_power
from trappm_ray.serving.plan import (cluster_text, config_dims, data_parallel_zero, exported_whole, layout_prediction,
                                     parse_parallel)
from trappm_ray.serving.prediction import Cost, Estimate, PredictOptions, Prediction
from trappm_ray.serving.routing import device_catalog, gpu_spec, load_predictor
from trappm_ray.serving.sizing import fitting_profiles, largest_batch, memory_at, runner_up
from trappm_ray.targets import REPORTED, TARGETS


def build_prediction(row: dict[str, float], graph: Graph, predictor: Estimator,
                     opts: PredictOptions, source: str, sha256: str,
                     times: dict[str, float] | None = None) -> Prediction:
    """A :class:`Prediction` from one ``predict_graphs`` row (no budget search): intervals widened
    where the model is unlike the training graphs, memory never below its physical floor
    (weights, gradients, optimizer state and the largest tensor: :mod:`trappm_ray.serving.checks`);
    ``times``: the graph's :func:`time_floors`, where known."""
    units = {t: TARGETS[t].unit for t in REPORTED}
    setting = resolve_options(requested_setting(opts, predictor), predictor.manifest)
    device, domain, spec = device_of(predictor), domain_of(predictor.manifest, graph), gpu_spec(predictor)
    if spec is not None:
        device["memory_gb"] = spec.memory_gb
    floors = {"train_memory_mb": memory_floor_mb(graph, setting["precision"], setting["optimizer"]),
              **(time_floors(graph, predictor, setting) if times is None else times)}

    def est(t: str) -> Estimate | None:
        if t not in row:
            return None
        mean, std = float(row[t]), float(row[f"{t}_std"])
        if f"{t}_low" in row:  # a conformal band (spec predictor, roofline GNNs), widened in log space
            low, high = (mean * (row[f"{t}_{e}"] / mean) ** domain["widen"] if mean > 0 else row[f"{t}_{e}"]
                         for e in ("low", "high"))
            floor = float(floors.get(t, 0.0))
            return Estimate(max(mean, floor), float(max(low, floor)), float(max(high, floor)), std, units[t])
        half = opts.interval_z * std * domain["widen"]
        # a cost is positive and its errors are relative: the low end mirrors the high end in
        # ratio (mean / (1 + h), never below mean - half), so a wide interval never reaches 0
        low = mean / (1 + half / mean) if mean > 0 else 0.0
        floor = float(floors.get(t, 0.0))
        return Estimate(max(mean, floor), max(low, floor), max(mean + half, floor), std, units[t])

    summary = graph.summary()
    shape = {k: summary[k] for k in ("nodes", "edges", "macs", "params") if k in summary}
    shape.update({k: graph.meta[k] for k in ("batch_rebound", "exported_batch") if k in graph.meta})
    p = Prediction(source, sha256, int(graph.static["batch_size"]), *(est(t) for t in
                   ("train_step_ms", "train_memory_mb", "inference_ms", "train_power_w")),
                   model_version(predictor), device, shape,
                   opts.interval_z, memory_budget_mb=opts.memory_budget_mb, options=setting,
                   domain=domain, floors=floors)
    if p.train_memory_mb is None and p.device.get("kind") not in ("cpu", "unknown"):
        # no measured GPU memory labels: the CUDA memory model answers (docs/memory.md)
        m = gpu_memory_mb(graph, setting["precision"], setting["optimizer"], **step_fields(setting))
        floor = floors["train_memory_mb"]
        p.train_memory_mb = Estimate(max(m["value"], floor), max(m["low"], floor),
                                     max(m["high"], floor), 0.0, "MB")
        p.memory_terms = m["terms"]
    if spec is not None and opts.precision and runs_as(spec, opts.precision) != opts.precision:
        p.notes.append(f"precision {opts.precision}: {spec.name} has no TF32 tensor cores, so PyTorch runs the "
                       f"step in fp32 (allow_tf32 changes nothing there): the fp32 answer")
    elif spec is not None and setting.get("precision") == "fp32" and spec.peak_tf32_tensor_tflops:
        p.notes.append(f"precision fp32 is PyTorch's default math on {spec.name}: convolutions in TF32 "
                       f"(cudnn.allow_tf32), matrix products in FP32; tf32 puts matrix products on TF32 too; "
                       f"strict FP32 (both off) is not answered")
    if device.get("note"):  # what the times rest on (spec-based, transferred), and their error
        p.notes.append(device["note"])
    moved = predictor.note(setting) if isinstance(predictor, SettingMove) else None
    if moved:  # a precision or optimizer no label of the GPU holds
        p.notes.append(moved)
    p.notes += [f"{t}: this graph was measured on {device.get('reference') or 'the reference GPU'} at batch "
                f"{int(row[f'{t}_measured_batch'])}; that measurement, moved by the roofline floors, answers"
                + (f" at batch {int(row[f'{t}_anchor'])}, the step model from there" if f"{t}_anchor" in row else "")
                for t in REPORTED if f"{t}_measured_batch" in row]
    if predictor.manifest.intervals:  # split-conformal bands (GPU predictors)
        p.interval = f"{predictor.manifest.intervals}, at the coverage of +-interval_z sd"
    p.warnings = ([domain["note"]] if domain["extrapolates"] else []) + absurdities(
        p.train_step_ms and p.train_step_ms.value, p.train_memory_mb and p.train_memory_mb.value,
        p.inference_ms and p.inference_ms.value)
    # the passes after the network, in order: several GPUs change the step and the memory per GPU
    # that the GPU fit, power, a power limit and the cost of N steps are computed on
    if spec is not None and (opts.gpus or 1) > 1:
        p.notes.append(with_data_parallel(p, graph, spec, setting, opts, predictor.manifest.launch))
    if p.train_memory_mb is not None and device.get("kind") in ("cuda", "rocm"):
        # a fit is a promise: the interval's upper end, not the point estimate, must fit
        p.gpu_profiles, p.smallest_profile = fitting_profiles(p.train_memory_mb.high)
        p.runner_up_profile = runner_up(p.train_memory_mb.high, p.smallest_profile)
    elif p.train_memory_mb is not None:
        p.notes.append("no GPU fit: this answer's memory is the CPU's; name a GPU (--device h100) for the smallest "
                       "GPU or MIG slice that holds it")
    if spec is not None and spec.tdp_w and p.train_step_ms is not None:
        p.notes += with_power(p, graph, spec, setting, opts.power_limit_w)
    elif opts.power_limit_w is not None:
        raise errors.UnsupportedOption("a power limit applies to a GPU with a sourced TDP; this answer is for "
                                       f"{device.get('name') or device.get('slug')}")
    if opts.steps and p.train_step_ms is not None:
        p.training_cost = p.cost(opts.steps, opts.price_per_hour, opts.price_per_kwh)
    if opts.layers > 0:
        p.layers = breakdown(graph, spec, setting["precision"], opts.layers)
    return p


def predict_many(models: list[tuple[bytes, PredictOptions, str]], predictor: Estimator
                 ) -> list[Prediction | errors.ModelError]:
    """Predict ``(onnx bytes, options, label)`` items with one pass per predictor over all graphs
    (``predictor``, or the one an item's ``opts.device`` names). A bad model yields its
    :class:`errors.ModelError` in its slot; the others are unaffected."""
    cache: dict[tuple, object] = {}  # the fp32 pass below reuses the models read and featurized
    answers = answer_rows(models, predictor, cache)
    checks: dict[tuple, list[int]] = {}  # answers held at the same model's in a setting of more work
    for i, a in enumerate(answers):
        if isinstance(a, Answered) and a.held_at:
            checks.setdefault(tuple(sorted(a.held_at.items())), []).append(i)
    for fields, items in checks.items():
        more = {f: above for f, (_, above) in fields}
        found = answer_rows([(models[i][0], replace(models[i][1], **more), models[i][2]) for i in items], predictor, cache)
        for i, f in zip(items, found):
            a = answers[i]
            if isinstance(a, Answered) and isinstance(f, Answered):
                a.notes += held_at(a.row, f.row, {field: asked for field, (asked, _) in fields})
    out: list[Prediction | errors.ModelError] = []
    for (_, opts, label), a in zip(models, answers):
        if not isinstance(a, Answered):
            out.append(a)
            continue
        p = build_prediction(a.row, a.graph, a.chosen, opts, label, a.sha, a.times)
        p.notes += a.notes
        if opts.memory_budget_mb is not None:
            p.max_batch_size = largest_batch(
                lambda b, a=a, opts=opts: memory_at(a.proto, opts, b, a.chosen, a.graph), opts.memory_budget_mb, opts.max_batch)
        out.append(p)
    return out


def predict(model, batch_size: int | None = 1, device: str | None = None, *,
            predictor: str | os.PathLike | Estimator | None = None, resolution: int | None = None,
            dims: dict[str, int] | None = None, memory_budget_mb: float | None = None,
            steps: int | None = None, price_per_hour: float | None = None,
            interval_z: float = 1.96, input_shape: tuple[int, ...] | None = None,
            precision: str | None = None, optimizer: str | None = None, gpus: int | None = None,
            memory_format: str | None = None, recompute: bool | None = None, grad_accum: int | None = None,
            device_spec: str | os.PathLike | DeviceSpec | None = None, power_limit_w: float | None = None,
            price_per_kwh: float | None = None, layers: int = 0, cluster: str | dict | None = None,
            parallel: str | None = None, global_batch: int | None = None) -> Prediction:
    """Predict the training step time, memory, power and inference latency of ``model``.

    Args:
        model: ONNX path, ``s3://`` URI, bytes or ModelProto; with the zoo extra also a torch
            ``nn.Module`` (exported with ``input_shape``, default ``(3, R, R)``), a timm name, or a
            transformers config (a ``config.json``, its folder, or a Hugging Face id in the local
            cache; :mod:`trappm_ray.serving.model_input`).
        batch_size: the batch size to predict for; None = the batch the file was exported with
            (the result's ``graph`` says whether a fixed batch was re-bound).
        device: the device as people name it (``h100``, ``3090``, a slug or NVML name): its
            shipped predictor, else for a GPU of the spec table the spec-based predictor (times
            from its specs alone); None: the default.
        predictor: a predictor URI or instance instead of a shipped one.
        resolution: value of symbolic spatial dims; export size of timm names and modules.
        dims: values of other named symbolic input dims.
        memory_budget_mb: also find the largest batch size that fits this memory.
        steps, price_per_hour, price_per_kwh: the hours (and on a GPU the energy) of ``steps``
            training steps, with their costs where a price is given.
        interval_z: interval half-width in ensemble standard deviations.
        precision, optimizer, gpus, memory_format: the training setting (None: the predictor's
            default); a value the device's predictor was never trained on raises
            ``errors.UnsupportedOption``.
        recompute, grad_accum: activation checkpointing of every residual block, and forward/backward
            passes of ``batch_size`` per optimizer step (GPUs: moved by the step model).
        device_spec: a user's GPU (``--device-spec`` JSON path or a DeviceSpec): predicted by the
            spec-based predictor; training memory from the CUDA memory model.
        power_limit_w: the GPU's power limit (W; None: its TDP): power and a slower step where it binds.
        layers: when positive, the breakdown of that many layers, costliest first.
        gpus, cluster: on a GPU, ``gpus`` above 1 is data parallelism at ``batch_size`` per GPU on
            ``cluster`` (a ``data/clusters.csv`` name, a JSON file, or a dict such as
            ``{"gpus_per_node": 8, "intra_node_gbs": 150, "inter_node_gbps": 800}``; None: the
            table's first of that GPU).
        parallel: the layout over ``gpus``: ``dp`` (the default), ``fsdp`` or ``zero1``-``zero3``
            (any model: the data-parallel step with ZeRO's collectives and states sharded), or for
            a transformers config also ``tp=T,pp=P[,dp=D][,zero=Z]``: then ``batch_size`` is the
            micro-batch, the step one optimizer step over ``global_batch`` sequences of the
            config's positions (or ``dims["seq"]``), answered by the layout model alone
            (:func:`trappm_ray.serving.plan.layout_prediction`; precision and optimizer default to
            amp-fp16 and Adam). A config above
            :data:`~trappm_ray.serving.plan.LARGEST_EXPORTED_PARAMS` parameters is answered so
            in every layout, one GPU included (exporting its whole graph would take minutes).
        global_batch: samples per optimizer step over every GPU: with ``dp``, gradient accumulation
            makes it up (``global_batch / (batch_size x gpus)`` passes).

    Raises:
        errors.ModelError: the model cannot be read or featurized (``.code``, ``.status``).
        PredictorError: no predictor (e.g. the default is not shipped in this checkout), or an
            unknown device (the message says how to pass ``device_spec``).
    """
    found = predict_each(model, [batch_size], [device], predictor=predictor, resolution=resolution, dims=dims,
                         memory_budget_mb=memory_budget_mb, steps=steps, price_per_hour=price_per_hour,
                         interval_z=interval_z, input_shape=input_shape, precision=precision, optimizer=optimizer,
                         gpus=gpus, memory_format=memory_format, recompute=recompute, grad_accum=grad_accum,
                         device_spec=device_spec, power_limit_w=power_limit_w, price_per_kwh=price_per_kwh,
                         layers=layers, cluster=cluster, parallel=parallel, global_batch=global_batch)[0]
    if isinstance(found, errors.ModelError):
        raise found
    return found


def predict_each(model, batch_sizes: list[int | None], devices: list[str | None], *,
                 predictor: str | os.PathLike | Estimator | None = None, resolution: int | None = None,
                 dims: dict[str, int] | None = None, input_shape: tuple[int, ...] | None = None,
                 device_spec: str | os.PathLike | DeviceSpec | None = None, interval_z: float = 1.96,
                 cluster: str | dict | None = None, parallel: str | None = None, gpus: int | None = None,
                 global_batch: int | None = None, precision: str | None = None, optimizer: str | None = None,
                 recompute: bool | None = None, steps: int | None = None, price_per_hour: float | None = None,
                 price_per_kwh: float | None = None, power_limit_w: float | None = None,
                 **options) -> list[Prediction | errors.ModelError]:
    """:func:`predict`'s answers of one model at each batch size on each device (batch-major), in
    one reading of the request: a batch sweep and a device comparison answer as one call would
    (the same layout, cluster, setting and global batch); a point that cannot be answered is its
    error. ``options``: :class:`PredictOptions` fields (``memory_budget_mb``, ``memory_format``,
    ``grad_accum``, ``layers``)."""
    cluster = cluster_text(cluster)
    points = [(b, d) for b in batch_sizes for d in devices]
    # a transformers config's layouts split its blocks (the layout model); ZeRO over plain data
    # parallelism shards any graph's states (the data-parallel pass)
    zero = data_parallel_zero(parallel, gpus)
    if zero is None or not exported_whole(model):
        out: list[Prediction | errors.ModelError] = []
        unanswered = sorted(k for k, v in options.items() if v not in (None, 0, 1, False, "nchw"))
        for b, d in points:
            try:
                if unanswered:  # refused, never ignored
                    raise errors.UnsupportedOption(
                        f"{', '.join(unanswered)}: not answered by the layout model (a tensor or pipeline layout, a "
                        "config above 20B parameters); `trappm-ray plan` lists each micro-batch's memory per GPU")
                out.append(layout_prediction(
                    model, b, gpu_spec(load_predictor(predictor, d, device_spec)), parse_parallel(parallel or "dp", gpus or 1),
                    global_batch, dict(dims or {}).get("seq"), precision, optimizer, bool(recompute), cluster, interval_z,
                    (steps, price_per_hour, price_per_kwh), power_limit_w))
            except errors.ModelError as e:
                out.append(e)
        return out
    dims = {**config_dims(model), **(dims or {})}
    several = len(set(devices)) > 1  # each item names its device; one predictor routes them
    chosen = load_predictor(predictor, None if several else devices[0], device_spec)
    data, label = model_bytes(model, resolution, input_shape)
    items, refused = [], {}
    for i, (b, d) in enumerate(points):
        try:  # each point's options (a global batch divides one batch and not another)
            items.append((data, PredictOptions(
                b, resolution, tuple(sorted(dims.items())), steps=steps, price_per_hour=price_per_hour,
                interval_z=interval_z, precision=precision, optimizer=optimizer, gpus=gpus, recompute=recompute,
                power_limit_w=power_limit_w, price_per_kwh=price_per_kwh, cluster=cluster, global_batch=global_batch,
                zero=zero, device=d if several else None, max_batch=max(PredictOptions.max_batch, b or 1), **options),
                label))
        except errors.ModelError as e:
            refused[i] = e
    found = iter(predict_many(items, chosen) if items else [])
    return [refused[i] if i in refused else next(found) for i in range(len(points))]


__all__ = ["Estimate", "Cost", "PredictOptions", "Prediction", "predict", "predict_each", "predict_many", "load_predictor",
           "device_catalog", "model_bytes", "config_dims", "build_prediction", "model_version", "device_of"]
