"""The host's issue time per kernel, measured on the GPU campaign's rows where the host sets the step.

The step model (:mod:`trappm_ray.physics.step_model`) charges eager PyTorch a fixed host time per
graph kernel it issues in each phase: :data:`~trappm_ray.physics.step_model.HOST_US`, set from
what this module reads, where a predictor has no profile of its own. The campaign's harness
times each phase of a step with CUDA events (forward with the loss, backward, optimizer;
``labels/campaign_run.py``), so on rows whose kernels are far
shorter than the phase (the step model's device time of the phase below :data:`HOST_BOUND` of
the measured time) the phase's time is the host's: divided by the kernels the step model counts
for the graph (:func:`~trappm_ray.physics.step_model.launches`), the host's time per kernel on
the campaign's machine and PyTorch version, for each phase and for inference. A row with
activation checkpointing or gradient accumulation issues more than one forward per step and is
left out.

The figures describe one machine (the GPU slot's host); the public sweeps' older stacks issue
kernels slower (``docs/results-step-model.md``).
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from trappm_ray import devices
from trappm_ray.graph.featurize import Graph
from trappm_ray.physics.step_model import HOST_US, Setting, launches, step_time

HOST_BOUND = 0.2  # a phase whose modelled device time is below this share of the measured one is the host's


@dataclass(frozen=True)
class HostFigure:
    """One model's host time per forward kernel on its host-bound rows (us, medians over rows).

    Attributes:
        model: the row's architecture.
        rows: host-bound rows read (training; inference rows counted apart in ``inference_rows``).
        kernels: forward kernels the step model counts for the graph (at the rows' first batch).
        forward_us, backward_us: the training step's forward (with the loss) and backward phases.
        inference_us: one inference pass.
        optimizer_ms: the optimizer phase (its list ops; per step, not per kernel).
        inference_rows: host-bound inference rows read.
    """

    model: str
    rows: int
    kernels: int
    forward_us: float | None
    backward_us: float | None
    inference_us: float | None
    optimizer_ms: float | None
    inference_rows: int = 0


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def host_figures(rows: Iterable[tuple[dict, Graph]], spec: devices.DeviceSpec,
                 setting_of: Callable[[dict], Setting]) -> list[HostFigure]:
    """Per model, the host's time per kernel on the campaign rows ``rows`` (``(row, graph)``) of
    GPU ``spec``, from the phases the step model calls host-bound; ``setting_of`` maps a row
    to its step-model :class:`~trappm_ray.physics.step_model.Setting`."""
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    kernels: dict[str, int] = {}
    for r, graph in rows:
        s = setting_of(r)
        if s.recompute or s.grad_accum > 1:
            continue
        try:
            train, infer = step_time(graph, spec, s), step_time(graph, spec, s, "infer")
        except ValueError:  # a precision the device has no sourced peak for
            continue
        k = kernels.setdefault(r["arch"], launches(graph, spec, s.precision))
        f = found[r["arch"]]
        fwd, bwd = r.get("forward_ms"), r.get("backward_ms")
        if fwd and bwd and train.forward_ms < HOST_BOUND * fwd and train.backward_ms < HOST_BOUND * bwd:
            f["forward"].append(fwd * 1e3 / k)
            f["backward"].append(bwd * 1e3 / k)
            if r.get("optimizer_ms"):
                f["optimizer"].append(r["optimizer_ms"])
        if r.get("inference_ms") and infer.device_ms < HOST_BOUND * r["inference_ms"]:
            f["inference"].append(r["inference_ms"] * 1e3 / k)
    return [HostFigure(model, len(f["forward"]), kernels[model], _median(f["forward"]), _median(f["backward"]),
                       _median(f["inference"]), _median(f["optimizer"]), len(f["inference"]))
            for model, f in sorted(found.items()) if f["forward"] or f["inference"]]


def across_models(figures: list[HostFigure]) -> dict[str, float | None]:
    """The median over models of each figure (each model counted once, whatever its rows)."""
    return {name: _median([v for f in figures if (v := getattr(f, f"{name}_us")) is not None])
            for name in ("forward", "backward", "inference")}


def markdown(figures: list[HostFigure]) -> list[str]:
    """The table of :func:`host_figures` beside the step model's own figures."""
    if not figures:
        return []
    mid = across_models(figures)
    out = ["### The host's time per kernel, measured (host-bound rows)", "",
           "Each phase of a step timed by CUDA events on rows whose kernels take less than "
           f"{HOST_BOUND:.0%} of it in the step model (mostly batch 1-16): the phase's time per forward "
           "kernel the step model counts (`trappm_ray/evaluate/host_figures.py`). The step model's figures, "
           "where a predictor has none of its own (`physics/step_model.HOST_US`), are these rows' medians over "
           "models: a check that they still are, and how far each model sits from them.", "",
           "| model | kernels | training rows | forward us | backward us | optimizer ms | inference rows | inference us |",
           "|---|---|---|---|---|---|---|---|"]
    out += [f"| {f.model} | {f.kernels} | {f.rows} | {_fmt(f.forward_us)} | {_fmt(f.backward_us)} | "
            f"{'-' if f.optimizer_ms is None else f'{f.optimizer_ms:.1f}'} | {f.inference_rows} | {_fmt(f.inference_us)} |"
            for f in figures]
    out += [f"| **median over models** | | | **{_fmt(mid['forward'])}** | **{_fmt(mid['backward'])}** | | | "
            f"**{_fmt(mid['inference'])}** |",
            f"| step model's figures | | | {HOST_US['forward']:.0f} | {HOST_US['backward']:.0f} | | | "
            f"{HOST_US['inference']:.0f} |", ""]
    return out


__all__ = ["HOST_BOUND", "HostFigure", "host_figures", "across_models", "markdown"]
