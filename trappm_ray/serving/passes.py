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
from trappm_ray.physics.collectives import allreduce_ms, cluster_for, exposed_allreduce_ms, gradient_buckets
from trappm_ray.physics.power import PowerModel, limit_refusal, power_basis, step_power
from trappm_ray.physics.step_model import step_time
from trappm_ray.serving.prediction import Estimate, PredictOptions, Prediction


@functools.lru_cache(maxsize=1)
def power_model() -> PowerModel:
    """The shipped power model's weights (read once)."""
    return PowerModel.load()


def with_data_parallel(p: Prediction, graph: Graph, spec: DeviceSpec, setting: dict, opts: PredictOptions,
                       launch_profiles: dict) -> str:
    """Make ``p`` (one GPU's step at the per-GPU batch) the step of ``opts.gpus`` data-parallel
    GPUs: plus the gradient all-reduce the backward does not hide (DDP buckets, ring or
    hierarchical on the cluster, :mod:`trappm_ray.physics.collectives`); memory plus DDP's
    gradient buckets; returns the note. The backward's share of the step is the step model's,
    with the predictor's host figures (``launch_profiles``) as the batch move and power use."""
    try:
        cluster = cluster_for(spec, opts.cluster)
    except ValueError as bad:
        raise errors.UnsupportedOption(str(bad)) from None
    gpus, params = int(opts.gpus or 1), float(graph.static["params"])
    accum = step_fields(setting)["grad_accum"]
    step = step_time(graph, spec, setting, "train", step_host_us(launch_profiles))
    # with gradient accumulation DDP reduces once, during the last pass's backward
    backward = (p.train_step_ms.value * step.backward_ms / step.total_ms / accum
                if p.train_step_ms and step.total_ms else 0.0)
    grad_bytes = 4 * params  # fp32 gradients, also under AMP
    total = allreduce_ms(grad_bytes, gpus, cluster)
    exposed = exposed_allreduce_ms(grad_bytes, backward, gpus, cluster, buckets=gradient_buckets(graph, spec, setting["precision"]))
    if p.train_step_ms is not None:
        e = p.train_step_ms
        p.train_step_ms = Estimate(e.value + exposed, e.low + exposed, e.high + exposed, e.std, e.unit)
    if p.train_memory_mb is not None:  # DDP's gradient buckets: a second copy of the gradients
        e, extra = p.train_memory_mb, grad_bytes / 2**20
        p.train_memory_mb = Estimate(e.value + extra, e.low + extra, e.high + extra, e.std, e.unit)
    nodes, p.options = -(-gpus // cluster.gpus_per_node), {**p.options, "gpus": gpus}  # one GPU's step on each
    p.distributed = {"gpus": gpus, "nodes": nodes, "cluster": cluster.slug, "global_batch": gpus * p.batch_size * accum,
                     "allreduce_ms": total, "exposed_allreduce_ms": exposed, "parallel": "dp",
                     "network_bytes_per_gpu": 2 * (gpus - 1) / gpus * grad_bytes}
    return (f"data parallel over {gpus} GPUs on {nodes} node(s) of {cluster.name} (batch {p.batch_size} per GPU, "
            f"{gpus * p.batch_size * accum} in all per step): the gradient all-reduce ({grad_bytes / 2**20:.0f} MB, {total:.3g} ms) "
            f"overlaps the backward in DDP's buckets as the backward makes them, {exposed:.3g} ms of it is not hidden; "
            f"Pollux's data-parallel steps read 3-11% off on one node, 7-9% across 2-4 nodes (docs/results-distributed.md)")


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
