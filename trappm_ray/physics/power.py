"""GPU power of a training step or an inference pass, and what a power limit does to it.

Board power is idle power plus dynamic power. The dynamic part follows what the step model
(:mod:`trappm_ray.physics.step_model`) says the kernels do: while the GPU is busy, a base
activity (clocks up, schedulers, caches) plus a share for the compute units in proportion to how
much of the busy time they are saturated (the roofline compute time over the kernel time) and a
share for the memory system in proportion to its saturation; while the GPU waits on the host it
draws idle power. In symbols, with the SM clock at ``s`` x its full clock::

    P(s) = P_idle + (TDP - P_idle) * busy(s) * ((k0 + kc * u_c(s)) * s**GAMMA + km * u_m(s))

A power limit below ``P(1)`` makes the GPU lower its clock until ``P(s)`` meets the limit
(dynamic power of the SMs ~ f V^2, with the voltage following the clock: ``GAMMA`` = 3): compute
stretches by ``1 / s``, memory traffic does not, so a memory-bound step barely slows. Zeus
(You et al., NSDI'23) measured exactly this trade on V100, P100 and RTX 6000.

The activity weights ``k0, kc, km`` (:class:`PowerModel`) are three non-negative numbers fitted by
least squares on measured average power of other GPUs (``fit``), each row with the share of its
measured time the GPU was busy (``busy``): physics says what drives the power, the labels only how
much each driver costs, the same for every GPU.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trappm_ray import devices
from trappm_ray.physics.step_model import StepEstimate, queue_ms

GAMMA = 3.0  # SM dynamic power ~ clock^3 (f x V^2 with V following f, the DVFS range)
# Idle board power as a share of TDP where the table has none: NVML reads 25-40 W on idle
# 250-300 W datacenter boards, 78 W on a 700 W H200 (11%; devices.csv idle_power_w). An
# assumption, stated, not fitted here.
IDLE_SHARE = 0.12
LEAST_CLOCK = 0.3  # the lowest SM clock a power limit drives a GPU to, as a share of full
# Power limits GPUs accept: from about 30-50% of TDP (P100 125 W, V100 100 W of 250) to TDP.
LOWEST_LIMIT_SHARE = 0.3
# The weights fitted on every public power label, with their provenance and held-out error
# (written by ``python jobs/evaluate_power.py``).
FITTED = Path(__file__).resolve().parents[1] / "data" / "power_model.json"


@dataclass(frozen=True)
class PowerModel:
    """Activity weights of the dynamic power (shares of TDP - idle), and the relative error of
    the power answer where it was checked on GPUs the weights were not fitted on.

    Attributes:
        k0, kc, km: base, compute and memory activity weights.
        error_p90: 90th percentile of |predicted / measured - 1| leaving one GPU out (the
            interval's half-width in ratio); None where never checked.
    """

    k0: float = 0.35
    kc: float = 0.45
    km: float = 0.25
    error_p90: float | None = None

    @classmethod
    def load(cls, path: str | Path = FITTED) -> PowerModel:
        """The fitted weights (the unfitted defaults where the file is absent)."""
        path = Path(path)
        if not path.exists():
            return cls()
        d = json.loads(path.read_text())
        return cls(**d["weights"], error_p90=d.get("error_p90"))


@dataclass(frozen=True)
class PowerEstimate:
    """Average board power over a step, and the step under the power limit.

    Attributes:
        power_w: average board power (W).
        step_ms: the step's time at that power (ms; longer than the step model's where the limit binds).
        clock: the SM clock as a share of full (1 where the limit does not bind).
        limit_w: the power limit applied (W).
        idle_w, tdp_w: the board's idle power and TDP used (W).
    """

    power_w: float
    step_ms: float
    clock: float
    limit_w: float
    idle_w: float
    tdp_w: float

    def energy_j(self) -> float:
        """Energy of one step (J)."""
        return self.power_w * self.step_ms / 1e3


def board_power(spec: devices.DeviceSpec) -> tuple[float, float]:
    """(idle W, TDP W) of ``spec`` (idle: the table's where measured, else :data:`IDLE_SHARE` of
    TDP); ValueError without a sourced TDP."""
    if not spec.tdp_w:
        raise ValueError(f"device {spec.slug!r} has no sourced TDP: no power model")
    return spec.idle_power_w or IDLE_SHARE * spec.tdp_w, float(spec.tdp_w)


def limit_refusal(spec: devices.DeviceSpec, limit_w: float) -> str | None:
    """Why ``spec`` cannot be set to ``limit_w`` (None: it can): below its lowest settable limit
    (the table's where sourced, else :data:`LOWEST_LIMIT_SHARE` of TDP) or above its TDP."""
    if not spec.tdp_w:
        return f"a power limit applies to a GPU with a sourced TDP; the {spec.name} has none"
    lowest = spec.min_power_limit_w or LOWEST_LIMIT_SHARE * spec.tdp_w
    if not lowest <= limit_w <= spec.tdp_w:
        about = "" if spec.min_power_limit_w else "about "
        return (f"power limit {limit_w:g} W is outside what the {spec.name} accepts ({about}"
                f"{lowest:.0f}-{spec.tdp_w:.0f} W: its TDP is the highest)")
    return None


def drivers(step: StepEstimate, clock: float = 1.0, busy: float | None = None) -> tuple[float, float, float, float]:
    """(busy share, compute saturation, memory saturation, step ms) of ``step`` at ``clock``.

    ``busy``: the share of the step the GPU is busy where it was measured (a training loop also
    waits on its data loader, which the step model does not see); None: the step model's own
    share (host issue time against device time). At a lower clock it grows as the device time does.
    """
    device = step.at_clock(clock)
    busy_us = float(device.sum())
    total_ms = queue_ms(step.host_us, device)
    if busy_us <= 0 or total_ms <= 0:
        return 0.0, 0.0, 0.0, total_ms
    u_c = float(np.minimum(step.compute_us / clock, device).sum()) / busy_us
    u_m = float(np.minimum(step.memory_us, device).sum()) / busy_us
    share = busy_us / 1e3 / total_ms if busy is None else busy * busy_us / float(step.device_us.sum())
    return min(share, 1.0), u_c, u_m, total_ms


def power_at(step: StepEstimate, spec: devices.DeviceSpec, model: PowerModel, clock: float = 1.0,
             busy: float | None = None) -> tuple[float, float]:
    """(average W, step ms) of ``step`` on ``spec`` with the SMs at ``clock`` (``busy``: :func:`drivers`)."""
    idle, tdp = board_power(spec)
    share, u_c, u_m, total_ms = drivers(step, clock, busy)
    dynamic = (model.k0 + model.kc * u_c) * clock ** GAMMA + model.km * u_m
    return idle + (tdp - idle) * share * min(dynamic, 1.0), total_ms


def step_power(step: StepEstimate, spec: devices.DeviceSpec, model: PowerModel = PowerModel(),
               limit_w: float | None = None, busy: float | None = None) -> PowerEstimate:
    """The step's average power and time under ``limit_w`` (None: the board's TDP, its default
    limit): the highest clock whose power meets the limit (bisection; power grows with clock).
    ``busy``: the measured busy share (:func:`drivers`; None: the step model's)."""
    idle, tdp = board_power(spec)
    limit = tdp if limit_w is None else float(limit_w)
    if limit <= idle:
        raise ValueError(f"a power limit of {limit:.0f} W is below the {spec.name}'s idle power ({idle:.0f} W)")
    power, ms = power_at(step, spec, model, 1.0, busy)
    if power <= limit:
        return PowerEstimate(power, ms, 1.0, limit, idle, tdp)
    lo, hi = LEAST_CLOCK, 1.0
    if power_at(step, spec, model, lo, busy)[0] > limit:
        power, ms = power_at(step, spec, model, lo, busy)
        return PowerEstimate(power, ms, lo, limit, idle, tdp)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power_at(step, spec, model, mid, busy)[0] <= limit else (lo, mid)
    power, ms = power_at(step, spec, model, lo, busy)
    return PowerEstimate(power, ms, lo, limit, idle, tdp)


def fit(rows: list[tuple[StepEstimate, devices.DeviceSpec, float, float | None]]) -> PowerModel:
    """The activity weights that best explain measured average power (W) of steps that ran
    below their power limit (non-negative least squares on the dynamic share); each row is
    ``(step, spec, watts, busy)`` with ``busy`` the measured busy share, or None (:func:`drivers`)."""
    from scipy.optimize import nnls

    a, b = [], []
    for step, spec, watts, measured_busy in rows:
        idle, tdp = board_power(spec)
        busy, u_c, u_m, _ = drivers(step, busy=measured_busy)
        a.append([busy, busy * u_c, busy * u_m])
        b.append((watts - idle) / (tdp - idle))
    k, _ = nnls(np.array(a), np.array(b))
    return PowerModel(*map(float, k))


__all__ = ["GAMMA", "IDLE_SHARE", "LEAST_CLOCK", "LOWEST_LIMIT_SHARE", "FITTED", "limit_refusal", "PowerModel", "PowerEstimate", "board_power", "drivers",
           "power_at", "step_power", "fit"]
