"""Where the step model's time misses, phase by phase, on the GPU campaign's device-bound rows.

The campaign's harness times each phase of a training step with CUDA events (forward with the
loss, backward, optimizer; ``labels/campaign_run.py``). Where the step model
(:mod:`trappm_ray.physics.step_model`) calls a phase device-bound (its kernels' device time at
least its host's issue time), the measured phase over the modelled one is the miss of the
kernels' modelled rates alone, per model and precision: which kinds of step the per-kernel rates
get wrong (TF32 GEMMs, NCHW convnets in half precision), apart from the host's issue time that
:mod:`~trappm_ray.evaluate.host_figures` reads on the host-bound rows. Rows with activation
checkpointing or gradient accumulation are left out (their phases hold more than one pass).
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from trappm_ray import devices
from trappm_ray.graph.featurize import Graph
from trappm_ray.physics.step_model import Setting, step_time

PHASES = ("forward", "backward", "optimizer")


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


def phase_splits(rows: Iterable[tuple[dict, Graph]], spec: devices.DeviceSpec,
                 setting_of: Callable[[dict], Setting]) -> list[PhaseSplit]:
    """Per (model, precision, memory format), the measured / modelled time of each phase on the
    rows ``(row, graph)`` of GPU ``spec`` whose phase the step model calls device-bound."""
    found: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r, graph in rows:
        s = setting_of(r)
        if s.recompute or s.grad_accum > 1 or not r.get("forward_ms"):
            continue
        try:
            step = step_time(graph, spec, s)
        except ValueError:  # a precision the device has no sourced peak for
            continue
        host = (step.forward_host_ms, step.backward_host_ms, step.host_ms - step.forward_host_ms - step.backward_host_ms)
        f = found[(r["arch"], f"{r['precision']}/{r['memory_format']}")]
        f["batch"].append(int(r["batch_size"]))
        for phase, device, issue in zip(PHASES, (step.forward_ms, step.backward_ms, step.optimizer_ms), host):
            measured = r.get(f"{phase}_ms")
            if measured and device > 0 and device >= issue:
                f[phase].append(measured / device)

    def mid(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    return [PhaseSplit(model, setting, len(f["batch"]), mid(f["forward"]), mid(f["backward"]), mid(f["optimizer"]),
                       (min(f["batch"]), max(f["batch"])))
            for (model, setting), f in sorted(found.items()) if any(f[p] for p in PHASES)]


def markdown(splits: list[PhaseSplit]) -> list[str]:
    """The table of :func:`phase_splits`."""
    if not splits:
        return []
    cell = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    out = ["### Where the step model's kernel rates miss: each device-bound phase, measured / modelled", "",
           "A phase counts where the step model's device time is at least its host's issue time; medians over "
           "the rows (`trappm_ray/evaluate/phase_split.py`). Near 1 the per-kernel rates hold; above 1 the "
           "kernels ran slower than modelled.", "",
           "| model | setting | rows | batches | forward | backward | optimizer |", "|---|---|---|---|---|---|---|"]
    out += [f"| {s.model} | {s.setting} | {s.rows} | {s.batches[0]}-{s.batches[1]} | {cell(s.forward)} | "
            f"{cell(s.backward)} | {cell(s.optimizer)} |" for s in splits]
    return out + [""]


__all__ = ["PHASES", "PhaseSplit", "phase_splits", "markdown"]
