"""Sizing a training job: which GPU or MIG slice its memory fits, and the largest batch that fits
a memory budget."""
from __future__ import annotations

from collections.abc import Callable

import onnx

from trappm_ray import devices, errors
from trappm_ray.graph.featurize import Graph
from trappm_ray.model.estimator import Estimator
from trappm_ray.model.options import resolve as resolve_options, step_fields
from trappm_ray.physics.floors import gpu_memory_mb, memory_floor_mb
from trappm_ray.serving.answering import requested_setting
from trappm_ray.serving.model_input import graph_at
from trappm_ray.serving.passes import data_parallel_memory
from trappm_ray.serving.prediction import PredictOptions


def _fits(memory_mb: float, memory_gb: float) -> bool:
    # DIPPM's rule, "< 5 GB" for the 5 GB profile: a job at exactly the size does not fit
    return memory_mb < memory_gb * 1024


def fitting_profiles(memory_mb: float) -> tuple[dict[str, str | None], str | None]:
    """Where a training job of ``memory_mb`` (device memory in use) fits.

    Returns:
        Per MIG-capable GPU of the spec table, its smallest MIG profile with more memory (the
        profile's nominal GB, 1 GB = 1024 MB; None: not even the whole GPU), and the smallest
        option over every GPU and MIG slice in the table (least memory, then least compute),
        as ``"<gpu> <profile>"`` or ``"<gpu>"`` for a whole GPU without MIG.
    """
    per_gpu: dict[str, str | None] = {}
    for spec in devices.load_specs().values():
        if spec.mig_capable:
            fit = next((p for p in devices.mig_profiles(spec.slug) if "+" not in p.profile
                        and _fits(memory_mb, p.memory_gb)), None)
            per_gpu[spec.slug] = fit.profile if fit else None
    best = next((o for o in devices.all_memory_options() if _fits(memory_mb, o.memory_gb)), None)
    if best is None:
        return per_gpu, None
    return per_gpu, f"{best.device_slug} {best.profile}" if best.profile else best.device_slug


def runner_up(memory_mb: float, best: str | None) -> str | None:
    """The next smallest option after ``best`` on another GPU model (the second answer a user
    weighs: ``a100-pcie-40gb 1g.5gb`` is followed by ``a30 1g.6gb``, not by the same A100's
    SXM4 twin's slice of equal size)."""
    if best is None:
        return None
    first = best.split(" ")[0]
    family = devices.get(first).name.split(" ")[:2]
    for o in devices.all_memory_options():
        if _fits(memory_mb, o.memory_gb) and devices.get(o.device_slug).name.split(" ")[:2] != family:
            return f"{o.device_slug} {o.profile}" if o.profile else o.device_slug
    return None


def memory_at(proto: onnx.ModelProto, opts: PredictOptions, batch_size: int,
              predictor: Estimator, known: Graph | None = None) -> float:
    """Training memory (MB) of ``proto`` at ``batch_size`` that a budget must hold: on a GPU the
    CUDA memory model's upper end (a fit is a promise), else the predictor's answer."""
    graph = graph_at(proto, opts, batch_size, known)
    gpus = int(opts.gpus or 1)
    setting = resolve_options(requested_setting(opts, predictor), predictor.manifest)  # one GPU's, as the answer's
    if "train_memory_mb" not in predictor.targets:  # a GPU predictor: the CUDA memory model
        one = gpu_memory_mb(graph, setting["precision"], setting["optimizer"], **step_fields(setting))["high"]
        return one + (data_parallel_memory(graph, setting, gpus, opts.zero)[0] if gpus > 1 else 0.0)  # as the answer's
    return max(predictor.predict_graphs([graph], [setting])[0]["train_memory_mb"],
               memory_floor_mb(graph, setting["precision"], setting["optimizer"]))


def largest_batch(memory_at: Callable[[int], float], budget_mb: float, max_batch: int) -> int:
    """Largest batch size whose training memory ``memory_at(batch)`` fits ``budget_mb``.

    Doubling then bisection; this assumes memory grows with the batch. A size whose memory
    cannot be computed (a :class:`~trappm_ray.errors.ModelError`) counts as not fitting.
    0: not even batch 1 fits.
    """
    memo: dict[int, bool] = {}

    def fits(b: int) -> bool:
        if b not in memo:
            try:
                memo[b] = memory_at(b) <= budget_mb
            except errors.ModelError:
                memo[b] = False
        return memo[b]

    if not fits(1):
        return 0
    lo = 1
    while lo < max_batch and fits(min(2 * lo, max_batch)):
        lo = min(2 * lo, max_batch)
    if lo == max_batch:
        return lo
    hi = min(2 * lo, max_batch)  # does not fit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


__all__ = ["memory_at", "fitting_profiles", "runner_up", "largest_batch"]
