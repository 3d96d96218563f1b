"""What the GPU campaign's phase timings say of the step model, phase by phase.

The campaign's harness times each phase of a training step with CUDA events (forward with the
loss, backward, optimizer; ``labels/campaign_run.py``). The step model
(:mod:`trappm_ray.physics.step_model`) splits each phase into the host's issue time and the
kernels' device time; a phase's measured time reads one of them where the other is small:

* **host-bound** (the phase's modelled device time below :data:`HOST_BOUND` of the measured
  time): the measured time over the kernels the step model counts
  (:func:`~trappm_ray.physics.step_model.launches`) is the host's time per kernel on the
  campaign's machine and PyTorch version, for each phase and for inference: what
  :data:`~trappm_ray.physics.step_model.HOST_US` is set from (:class:`HostFigure`);
* **device-bound** (the modelled device time at least the host's issue time): the measured over
  the modelled time is the miss of the kernels' modelled rates alone, per model and setting
  (:class:`PhaseSplit`): which kinds of step the per-kernel rates get wrong (NCHW convnets in half
  precision), apart from the host.

Rows with activation checkpointing or gradient accumulation are left out (their phases hold more
than one pass). The host figures describe one machine (the GPU slot's host); the public sweeps'
older stacks issue kernels slower (``docs/results-step-model.md``).
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
PHASES = ("forward", "backward", "optimizer")


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


@dataclass(frozen=True)
class PhaseSplit:
    """Measured over modelled time of each device-bound phase of one model in one setting (medians
    over rows; None where no row's phase was device-bound).

    Attributes:
        model: the row's architecture.
        setting: precision and memory format.
        rows: training rows read.
        forward, backward, optimizer: the phases' measured / modelled device time.
        batches: the smallest and largest batch read.
    """

    model: str
    setting: str
    rows: int
    forward: float | None
    backward: float | None
    optimizer: float | None
    batches: tuple[int, int]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def phase_readings(rows: Iterable[tuple[dict, Graph]], spec: devices.DeviceSpec, setting_of: Callable[[dict], Setting]
                   ) -> tuple[list[HostFigure], list[PhaseSplit]]:
    """Per model the host's time per kernel, and per (model, precision, memory format) the
    measured / modelled time of each device-bound phase, on the campaign rows ``rows``
    (``(row, graph)``) of GPU ``spec``; ``setting_of`` maps a row to its step-model
    :class:`~trappm_ray.physics.step_model.Setting`."""
    host: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    rates: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
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
        h = host[r["arch"]]
        fwd, bwd = r.get("forward_ms"), r.get("backward_ms")
        if fwd and bwd and train.forward_ms < HOST_BOUND * fwd and train.backward_ms < HOST_BOUND * bwd:
            h["forward"].append(fwd * 1e3 / k)
            h["backward"].append(bwd * 1e3 / k)
            if r.get("optimizer_ms"):
                h["optimizer"].append(r["optimizer_ms"])
        if r.get("inference_ms") and infer.device_ms < HOST_BOUND * r["inference_ms"]:
            h["inference"].append(r["inference_ms"] * 1e3 / k)
        if not fwd:
            continue
        f = rates[(r["arch"], f"{r['precision']}/{r['memory_format']}")]
        f["batch"].append(int(r["batch_size"]))
        issue = (train.forward_host_ms, train.backward_host_ms,
                 train.host_ms - train.forward_host_ms - train.backward_host_ms)
        for phase, device, issued in zip(PHASES, (train.forward_ms, train.backward_ms, train.optimizer_ms), issue):
            measured = r.get(f"{phase}_ms")
            if measured and device > 0 and device >= issued:
                f[phase].append(measured / device)
    figures = [HostFigure(model, len(h["forward"]), kernels[model], _median(h["forward"]), _median(h["backward"]),
                          _median(h["inference"]), _median(h["optimizer"]), len(h["inference"]))
               for model, h in sorted(host.items()) if h["forward"] or h["inference"]]
    splits = [PhaseSplit(model, setting, len(f["batch"]), _median(f["forward"]), _median(f["backward"]),
                         _median(f["optimizer"]), (min(f["batch"]), max(f["batch"])))
              for (model, setting), f in sorted(rates.items()) if any(f[p] for p in PHASES)]
    return figures, splits


def across_models(figures: list[HostFigure]) -> dict[str, float | None]:
    """The median over models of each host figure (each model counted once, whatever its rows)."""
    return {name: _median([v for f in figures if (v := getattr(f, f"{name}_us")) is not None])
            for name in ("forward", "backward", "inference")}


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def host_table(figures: list[HostFigure]) -> list[str]:
    """The host figures of :func:`phase_readings` beside the step model's own."""
    if not figures:
        return []
    mid = across_models(figures)
    out = ["### The host's time per kernel, measured (host-bound rows)", "",
           "Each phase of a step timed by CUDA events on rows whose kernels take less than "
           f"{HOST_BOUND:.0%} of it in the step model (mostly batch 1-16): the phase's time per forward "
           "kernel the step model counts (`trappm_ray/evaluate/phases.py`). The step model's figures, "
           "where a predictor has none of its own (`physics/step_model.HOST_US`), are these rows' medians over "
           "models: a check that they still are, and how far each model sits from them.", "",
           "| model | kernels | training rows | forward us | backward us | optimizer ms | inference rows | inference us |",
           "|---|---|---|---|---|---|---|---|"]
    out += [f"| {f.model} | {f.kernels} | {f.rows} | {_fmt(f.forward_us)} | {_fmt(f.backward_us)} | "
            f"{_fmt(f.optimizer_ms, 1)} | {f.inference_rows} | {_fmt(f.inference_us)} |" for f in figures]
    out += [f"| **median over models** | | | **{_fmt(mid['forward'])}** | **{_fmt(mid['backward'])}** | | | "
            f"**{_fmt(mid['inference'])}** |",
            f"| step model's figures | | | {HOST_US['forward']:.0f} | {HOST_US['backward']:.0f} "
            f"(+{HOST_US['autocast']:.0f} under autocast) | | | {HOST_US['inference']:.0f} |", ""]
    return out


def rate_table(splits: list[PhaseSplit]) -> list[str]:
    """The device-bound phases of :func:`phase_readings`, measured / modelled."""
    if not splits:
        return []
    out = ["### Where the step model's kernel rates miss: each device-bound phase, measured / modelled", "",
           "A phase counts where the step model's device time is at least its host's issue time; medians over "
           "the rows (`trappm_ray/evaluate/phases.py`). Near 1 the per-kernel rates hold; above 1 the "
           "kernels ran slower than modelled.", "",
           "| model | setting | rows | batches | forward | backward | optimizer |", "|---|---|---|---|---|---|---|"]
    out += [f"| {s.model} | {s.setting} | {s.rows} | {s.batches[0]}-{s.batches[1]} | {_fmt(s.forward, 2)} | "
            f"{_fmt(s.backward, 2)} | {_fmt(s.optimizer, 2)} |" for s in splits]
    return out + [""]


__all__ = ["HOST_BOUND", "PHASES", "HostFigure", "PhaseSplit", "phase_readings", "across_models", "host_table",
           "rate_table"]
