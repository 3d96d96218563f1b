"""The passes a prediction goes through after the network, in order: several GPUs (data
parallelism changes the step and the memory per GPU), then power and a power limit (which
lengthens the step). Each fills a :class:`~trappm_ray.serving.prediction.Prediction` in place
from physics on the same graph and setting and returns the notes that say how."""
from __future__ import annotations

import functools

from trappm_ray import errors
from trappm_ray.devices import DeviceSpec
from trappm_ray.graph.featurize import Graph
from trappm_ray.model.launch import step_host_us
from trappm_ray.model.options import step_fields
from trappm_ray.physics.collectives import (allreduce_ms, cluster_for, exposed_allreduce_ms, gradient_buckets,
                                            sharded_sync_ms)
from trappm_ray.physics.floors import gpu_memory_mb
from trappm_ray.physics.memory import PRECISIONS
from trappm_ray.physics.power import PowerModel, limit_refusal, power_basis, step_power
from trappm_ray.physics.step_model import step_time
from trappm_ray.serving.prediction import Estimate, PredictOptions, Prediction


@functools.lru_cache(maxsize=1)
def power_model() -> PowerModel:
    """The shipped power model's weights (read once)."""
    return PowerModel.load()


def data_parallel_memory(graph: Graph, setting: dict, gpus: int, zero: int) -> tuple[float, dict | None]:
    """(MB one GPU holds beyond its single-GPU training memory, ZeRO's CUDA memory model answer or
    None) under data parallelism over ``gpus``: DDP's gradient buckets, a second copy of the fp32
    gradients; under ZeRO (``zero`` 1-3) the states sharded, less than one GPU alone."""
    if not zero:
        return 4 * float(graph.static["params"]) / 2**20, None
    plain, kept = (gpu_memory_mb(graph, setting["precision"], setting["optimizer"], zero=z, shards=gpus,
                                 **step_fields(setting)) for z in (0, zero))
    return kept["value"] - plain["value"], kept


def with_data_parallel(p: Prediction, graph: Graph, spec: DeviceSpec, setting: dict, opts: PredictOptions,
                       launch_profiles: dict) -> str:
    """Make ``p`` (one GPU's step at the per-GPU batch) the step of ``opts.gpus`` data-parallel
    GPUs: plus the gradient all-reduce the backward does not hide (DDP buckets, ring or
    hierarchical on the cluster, :mod:`trappm_ray.physics.collectives`); memory plus DDP's
    gradient buckets; returns the note. What the collectives hide behind is each pass as it runs
    (its device or, where the host is slower, its issue time: the step model's, with the
    predictor's host figures ``launch_profiles`` as the batch move and power use), scaled to the answer.
    Under ZeRO (``opts.zero``) the collectives are ZeRO's, each GPU updates its share of the
    parameters, and its memory is the CUDA memory model's with the states sharded."""
    try:
        cluster = cluster_for(spec, opts.cluster)
    except ValueError as bad:
        raise errors.UnsupportedOption(str(bad)) from None
    gpus, params, zero = int(opts.gpus or 1), float(graph.static["params"]), opts.zero
    accum = step_fields(setting)["grad_accum"]
    step = step_time(graph, spec, setting, "train", step_host_us(launch_profiles))
    # the answer's time in each phase, at the step model's shares of it
    share = (p.train_step_ms.value / step.total_ms) if p.train_step_ms and step.total_ms else 0.0
    # with gradient accumulation DDP reduces once, during the last pass's backward
    backward, forward = share * step.backward_span_ms / accum, share * step.forward_span_ms / accum
    grad_bytes = 4 * params  # fp32 gradients, also under AMP
    buckets = gradient_buckets(graph, spec, setting["precision"])
    ring = (gpus - 1) / gpus  # what one GPU sends in a ring reduce-scatter or all-gather, per byte reduced
    if zero:
        master, _, low = PRECISIONS[setting["precision"]]  # the weights gathered are those the kernels run in
        weight_bytes = params * (low or master)
        total, exposed = sharded_sync_ms(grad_bytes, weight_bytes, forward, backward, gpus, cluster,
                                         zero, buckets, passes=accum)
        saved = share * step.optimizer_ms * (1 - 1 / gpus)  # each GPU updates its share of the parameters
        # ZeRO-1/2: the gradients reduce-scattered, the weights gathered once; ZeRO-3 gathers them for
        # the forward and the backward of every pass (sharded_sync_ms's terms)
        sent = ring * (grad_bytes + weight_bytes if zero < 3 else accum * (grad_bytes + 2 * weight_bytes))
    else:
        total = allreduce_ms(grad_bytes, gpus, cluster)
        exposed = exposed_allreduce_ms(grad_bytes, backward, gpus, cluster, buckets=buckets)
        saved, sent = 0.0, 2 * ring * grad_bytes
    if p.train_step_ms is not None:
        e, change = p.train_step_ms, exposed - saved
        p.train_step_ms = Estimate(e.value + change, e.low + change, e.high + change, e.std, e.unit)
    if p.train_memory_mb is not None:
        extra, kept = data_parallel_memory(graph, setting, gpus, zero)
        if kept is not None:
            p.floors["train_memory_mb"] = kept["terms"]["floor"]  # weights, gradients, optimizer state: its share
            if p.memory_terms:  # the terms of the answer it gives, the CUDA memory model's
                p.memory_terms = kept["terms"]
        e = p.train_memory_mb
        p.train_memory_mb = Estimate(e.value + extra, e.low + extra, e.high + extra, e.std, e.unit)
    layout = ("dp", "zero1", "zero2", "fsdp")[zero]
    nodes, p.options = -(-gpus // cluster.gpus_per_node), {**p.options, "gpus": gpus, "zero": zero}  # one GPU's step on each
    p.distributed = {"gpus": gpus, "nodes": nodes, "cluster": cluster.slug, "global_batch": gpus * p.batch_size * accum,
                     "allreduce_ms": total, "exposed_allreduce_ms": exposed, "optimizer_saved_ms": saved,
                     "parallel": layout, "zero": zero, "network_bytes_per_gpu": sent}
    where = (f"data parallel over {gpus} GPUs on {nodes} node(s) of {cluster.name} (batch {p.batch_size} per GPU, "
             f"{gpus * p.batch_size * accum} in all per step)")
    if not zero:
        return (f"{where}: the gradient all-reduce ({grad_bytes / 2**20:.0f} MB, {total:.3g} ms) overlaps the backward "
                f"in DDP's buckets as the backward makes them, {exposed:.3g} ms of it is not hidden; Pollux's "
                f"data-parallel steps read 3-11% off on one node, 7-9% across 2-4 nodes (docs/results-distributed.md)")
    sharded = ("optimizer state", "optimizer state and gradients", "weights, gradients and optimizer state")[zero - 1]
    return (f"{where}, ZeRO-{zero}{' (FSDP)' if zero == 3 else ''}: each GPU keeps 1/{gpus} of the {sharded} and updates "
            f"its share of the parameters; its collectives ({total:.3g} ms) add {exposed:.3g} ms the passes do not hide, "
            f"and updating 1/{gpus} of the parameters saves {saved:.3g} ms; derived from the DDP model and the CUDA "
            f"memory model, not checked against measured ZeRO or FSDP steps")


def with_power(p: Prediction, graph: Graph, spec: DeviceSpec, setting: dict, limit_w: float | None) -> list[str]:
    """Fill ``p``'s power (:mod:`trappm_ray.physics.power` on the step model of the same graph and
    setting, its own busy share and host figures: the answer the power model was checked as,
    docs/results-power.md) and, under a limit that binds, lengthen its step time; returns the notes."""
    if limit_w is not None and (refusal := limit_refusal(spec, limit_w)) is not None:
        raise errors.UnsupportedOption(refusal)
    model = power_model()
    train, infer = (step_time(graph, spec, setting, mode) for mode in ("train", "infer"))
    at, free = (step_power(train, spec, model, lim) for lim in (limit_w, None))
    at_infer = step_power(infer, spec, model, limit_w)
    band = model.interval_band()
    low, high = at.interval(band)
    p.train_power_w = Estimate(at.power_w, low, high, (high - low) / 2 / 1.645, "W")
    notes = [f"power: idle {at.idle_w:.0f} W plus {model.busy_w(spec):.0f} W for the share of the step its kernels "
             f"keep the GPU busy ({power_basis(model, spec)}), held at the {at.limit_w:.0f} W limit; fitted on Zeus's P100, V100 "
             f"and RTX 6000 measurements; " + (f"90% of the rows of GPUs it was not fitted on measured {band[0]:.2f}-"
                                                f"{band[1]:.2f}x such an answer (docs/results-power.md)" if model.band else
                                                "no held-out check set its interval: half the answer up to the limit")]
    slowdown = at.step_ms / free.step_ms if free.step_ms > 0 else 1.0
    if slowdown > 1 + 1e-3 and p.train_step_ms is not None:
        e = p.train_step_ms
        p.train_step_ms = Estimate(e.value * slowdown, e.low * slowdown, e.high * slowdown, e.std * slowdown, e.unit)
        notes.append(f"under the {at.limit_w:.0f} W limit the SMs run at {at.clock:.2f} of their clock: the step "
                     f"lengthens {slowdown:.3f}x (compute stretches, memory traffic does not)")
    gpus = (p.distributed or {}).get("gpus", 1)  # every GPU draws about what one does
    p.power = {"limit_w": at.limit_w, "clock": at.clock, "train_power_w": at.power_w,
               "total_train_power_w": gpus * at.power_w,
               "inference_power_w": at_infer.power_w, "inference_power_interval_w": list(at_infer.interval(band)),
               "energy_per_step_j": gpus * at.power_w * p.train_step_ms.value / 1e3 if p.train_step_ms else None,
               "idle_w": at.idle_w, "tdp_w": at.tdp_w}
    return notes


__all__ = ["power_model", "with_data_parallel", "with_power"]
