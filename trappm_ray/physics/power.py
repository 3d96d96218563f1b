"""GPU power of a training step or an inference pass, and what a power limit does to it.

Board power is idle power plus dynamic power. While its kernels run, a GPU draws dynamic power in
proportion to the arithmetic units it switches: its peak FP32 throughput (SMs x lanes x clock,
the datasheet's figure) times a weight in W per TFLOP/s; while it waits (on the host, on a data
loader: the share of the step the kernels of the step model, :mod:`trappm_ray.physics.step_model`,
do not fill, :func:`answered_busy`) it draws idle power. In symbols, with the SM clock at ``s`` x its full clock::

    P(s) = P_idle + busy(s) * w * F32 * s * v(s)**2,    v(s) = max(s, v_floor)

A power limit below ``P(1)`` makes the GPU lower its clock until ``P(s)`` meets the limit: the
dynamic power of the SMs is ~ f V^2, and the voltage ``v`` (a share of its value at full clock)
follows the clock down to the lowest voltage the chip runs at, ``v_floor``; below it only the
clock falls, and power with it only linearly, so a deep cap slows a step far more than the
clock-cubed law reads (Zeus, You et al. NSDI'23, measured 2.4-2.7x at 100 W on a 260 W RTX 6000).
Compute stretches by ``1 / s``, memory traffic does not, so a memory-bound step barely slows.
The board's default limit is its TDP, and its boost clock is the one its busy units hold within
it: their draw at full clock is ``w x F32`` at most the TDP less idle power
(:meth:`PowerModel.busy_w`; the H200 ran its busy steps at 0.99 of boost at 580-640 W of 700).
``w x F32`` alone reads more than the TDP on GPUs that doubled their fp32 lanes without doubling
their power (Ampere's GA10x, Ada, Hopper: an RTX 4090 would be held at 0.55 of its clock at
450 W, and a 300 W limit would read 0.29). With the host figures the campaign measured
(:data:`~trappm_ray.physics.step_model.HOST_US`) the H200's training power reads 12.0% MAPE so (12.3% with
the optimizer's host time, TF32 GEMMs and the backward without autocast measured, 2026-12-03), 16.3%
with ``w x F32`` unbounded below the cap (``jobs/evaluate_power.py``, 2026-12-02; with the older,
slower host figures the unbounded draw read 12.8% and the bounded one 16.5%: a step the slower
host left idle hid the units' excess).

Why the units' throughput, not the TDP: on the same device-bound training steps a P100 draws 0.65
of its 250 W, a V100 and an RTX 6000 0.9 of theirs, and an H200 0.9-0.98 of 700 W
(``docs/results-power.md``); the P100 has 9.3 fp32 TFLOP/s behind its 250 W, the V100 14. The
weight ``w`` (:class:`PowerModel`) is one number fitted by least squares on measured average
power of other GPUs (``fit``), each row with the share of its measured time the GPU was busy.
``v_floor`` is a second fitted number, on the slowdowns Zeus measured under limits
(``fit_voltage_floor``). A split into compute- and memory-bound activity holds out no better on these labels
(``experiments/power_kernels.py``): the model answers a memory-bound step's power as a busy
GPU's (an H200 copy kernel draws 472 W where a GEMM meets the 700 W cap: over-answered).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from trappm_ray import devices
from trappm_ray.physics.step_model import StepEstimate, queue_ms

# Fitted voltage floors lie in VOLTAGE_FLOORS: a chip's lowest voltage is well above a third of
# its highest, and a floor at 1 would mean no voltage scaling at all. Where no fit is shipped the
# floor is the range's lowest: the clock-cubed law down to a third of the clock.
VOLTAGE_FLOORS = (0.3, 1.0)
# Idle board power as a share of TDP where the table has none: NVML reads 25-40 W on idle
# 250-300 W datacenter boards, 78 W on a 700 W H200 (11%; devices.csv idle_power_w). An
# assumption, stated, not fitted here.
IDLE_SHARE = 0.12
# The lowest SM clock a power limit drives a GPU to, as a share of full: below its lowest DVFS
# clock (a few hundred MHz of 1.4-2 GHz) the board still meets its limit by throttling harder, and
# a GPU whose units the weight over-reads (an L4: 30 fp32 TFLOP/s on a 72 W board) needs it.
LEAST_CLOCK = 0.05
# Power limits GPUs accept: from about 30-50% of TDP (P100 125 W, V100 100 W of 250) to TDP.
LOWEST_LIMIT_SHARE = 0.3
# An interval's factors on an answer where no held-out check set them: half the answer up to the
# power limit (a wide band, stated as such, not a measured one).
UNCHECKED_BAND = (0.5, float("inf"))
# The weight fitted on every public power label, with its provenance and held-out error
# (written by ``python jobs/evaluate_power.py``).
FITTED = Path(__file__).resolve().parents[1] / "data" / "power_model.json"


@dataclass(frozen=True)
class PowerModel:
    """The dynamic power of a busy GPU per unit of its peak FP32 throughput, and the relative
    error of the power answer where it was checked on GPUs it was not fitted on.

    Attributes:
        w_per_tflop: W per fp32 TFLOP/s of peak at full clock while the GPU is busy; None, the
            unfitted physics: a busy GPU draws its TDP.
        band: (low, high) measured / answered power holding 90% of the rows of each GPU the
            weight was not fitted on (the lowest 5th and the highest 95th percentile over those
            GPUs: a 90% interval's factors on the answer); None where never checked
            (:data:`UNCHECKED_BAND`).
        voltage_floor: the lowest SM voltage as a share of its value at full clock; below the
            clock with that share, power falls only linearly with the clock (:data:`VOLTAGE_FLOORS`).
    """

    w_per_tflop: float | None = None
    band: tuple[float, float] | None = None
    voltage_floor: float = VOLTAGE_FLOORS[0]

    @classmethod
    def load(cls, path: str | Path = FITTED) -> PowerModel:
        """The fitted weight (the unfitted model where the file is absent)."""
        path = Path(path)
        if not path.exists():
            return cls()
        d = json.loads(path.read_text())
        band = d.get("band")
        return cls(d["w_per_tflop"], band=(float(band[0]), float(band[1])) if band else None,
                   voltage_floor=d.get("voltage_floor", VOLTAGE_FLOORS[0]))

    def interval_band(self) -> tuple[float, float]:
        """The interval's factors on an answer (:attr:`band`, else :data:`UNCHECKED_BAND`)."""
        return self.band or UNCHECKED_BAND

    def busy_w(self, spec: devices.DeviceSpec) -> float:
        """Dynamic power (W) of ``spec``'s units busy at full clock: ``w x F32``, at most the TDP
        less idle power. A board's boost clock is the clock its busy units hold within its TDP:
        the H200 campaign's busy training steps ran at 0.99 of boost (NVML) drawing 580-640 W of
        700, where ``w x F32``'s 861 W would hold them at 0.90 of it, and an RTX 4090's 1,061 W at
        0.55 (Ampere's GA10x, Ada and Hopper doubled their fp32 lanes, not their power)."""
        idle, tdp = board_power(spec)
        if self.w_per_tflop is None:
            return tdp - idle
        if not spec.peak_fp32_tflops:
            raise ValueError(f"device {spec.slug!r} has no sourced FP32 peak: no power model")
        return min(self.w_per_tflop * spec.peak_fp32_tflops, tdp - idle)

    def clock_factor(self, clock: float) -> float:
        """Dynamic power at ``clock`` (a share of full) over that at full clock: f V^2, the
        voltage following the clock down to :attr:`voltage_floor`."""
        return clock * max(clock, self.voltage_floor) ** 2


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

    def interval(self, band: tuple[float, float]) -> tuple[float, float]:
        """(low, high) W: the answer times ``band``'s factors (:attr:`PowerModel.band`), never below
        idle power nor above the limit."""
        return max(self.power_w * band[0], self.idle_w), min(self.power_w * band[1], self.limit_w)


def board_power(spec: devices.DeviceSpec) -> tuple[float, float]:
    """(idle W, TDP W) of ``spec`` (idle: the table's where measured, else :data:`IDLE_SHARE` of
    TDP); ValueError without a sourced TDP."""
    if not spec.tdp_w:
        raise ValueError(f"device {spec.slug!r} has no sourced TDP: no power model")
    return spec.idle_power_w or IDLE_SHARE * spec.tdp_w, float(spec.tdp_w)


def limit_refusal(spec: devices.DeviceSpec, limit_w: float) -> str | None:
    """Why ``spec`` cannot be set to ``limit_w`` (None: it can): below its lowest settable limit
    (the table's where sourced, else :data:`LOWEST_LIMIT_SHARE` of TDP) or above its highest (the
    table's where sourced, else its TDP)."""
    if not spec.tdp_w:
        return f"a power limit applies to a GPU with a sourced TDP; the {spec.name} has none"
    lowest = spec.min_power_limit_w or LOWEST_LIMIT_SHARE * spec.tdp_w
    highest = spec.max_power_limit_w or spec.tdp_w
    if not lowest <= limit_w <= highest:
        about = "" if spec.min_power_limit_w else "about "
        top = "its highest settable" if spec.max_power_limit_w else "its TDP is the highest"
        return (f"power limit {limit_w:g} W is outside what the {spec.name} accepts ({about}"
                f"{lowest:.0f}-{highest:.0f} W: {top})")
    return None


def power_basis(model: PowerModel, spec: devices.DeviceSpec) -> str:
    """How :meth:`PowerModel.busy_w` was derived for ``spec``, in words."""
    if model.w_per_tflop is None:
        return "a busy GPU draws its TDP: unfitted"
    idle, tdp = board_power(spec)
    capped = "" if model.w_per_tflop * (spec.peak_fp32_tflops or 0.0) <= tdp - idle else ", at most its TDP less idle"
    return f"{model.w_per_tflop:.1f} W per TFLOP/s of its {spec.peak_fp32_tflops:g} fp32 TFLOP/s{capped}"


def answered_busy(step: StepEstimate, answered_ms: float | None) -> float | None:
    """The share of an answered or measured step (ms) the GPU runs ``step``'s kernels: their device
    time over it, at most 1 (a step longer than the model's queue is time the GPU waits on the host
    or a data loader, or runs below the modelled rates); None without an answer (:func:`busy_share`
    then takes the step model's own share)."""
    return min(step.device_ms / answered_ms, 1.0) if answered_ms and answered_ms > 0 else None


def busy_share(step: StepEstimate, clock: float = 1.0, busy: float | None = None) -> tuple[float, float]:
    """(share of the step the GPU is busy, step ms) of ``step`` with the SMs at ``clock``.

    ``busy``: the share measured at full clock (a training loop also waits on its data loader,
    which the step model does not see); None: the step model's own share (device time against
    the queue of host issue and device time). At a lower clock the busy time grows as the
    device time does.
    """
    device = step.at_clock(clock)
    busy_us = float(device.sum())
    total_ms = queue_ms(step.host_us, device)
    if busy_us <= 0 or total_ms <= 0:
        return 0.0, total_ms
    share = busy_us / 1e3 / total_ms if busy is None else busy * busy_us / float(step.device_us.sum())
    return min(share, 1.0), total_ms


def power_at(step: StepEstimate, spec: devices.DeviceSpec, model: PowerModel, clock: float = 1.0,
             busy: float | None = None, units_w: float | None = None) -> tuple[float, float]:
    """(average W, step ms) of ``step`` on ``spec`` with the SMs at ``clock`` (``busy``: :func:`busy_share`;
    ``units_w``: the busy units' draw at full clock, :meth:`PowerModel.busy_w` where None)."""
    idle, _ = board_power(spec)
    share, total_ms = busy_share(step, clock, busy)
    units = model.busy_w(spec) if units_w is None else units_w
    return idle + share * units * model.clock_factor(clock), total_ms


def step_power(step: StepEstimate, spec: devices.DeviceSpec, model: PowerModel = PowerModel(),
               limit_w: float | None = None, busy: float | None = None) -> PowerEstimate:
    """The step's average power and time under ``limit_w`` (None: the board's TDP, its default
    limit). The clock is the highest whose draw (:meth:`PowerModel.busy_w`) meets the limit
    (bisection; power grows with clock); the power is the draw at that clock, held at the limit.
    ``busy``: the measured busy share
    (:func:`busy_share`; None: the step model's). A limit above the TDP (a board whose highest
    settable limit is above it) is answered as the TDP: the board holds its boost clock within its
    TDP, and no clock above boost is modelled."""
    idle, tdp = board_power(spec)
    asked = tdp if limit_w is None else float(limit_w)
    if asked <= idle:
        raise ValueError(f"a power limit of {asked:.0f} W is below the {spec.name}'s idle power ({idle:.0f} W)")
    limit = min(asked, tdp)

    def estimate(clock: float) -> PowerEstimate:
        drawn, ms = power_at(step, spec, model, clock, busy)
        return PowerEstimate(min(drawn, limit), ms, clock, asked, idle, tdp)  # held there at the least clock

    if power_at(step, spec, model, 1.0, busy)[0] <= limit:
        return estimate(1.0)
    lo, hi = LEAST_CLOCK, 1.0
    if power_at(step, spec, model, lo, busy)[0] > limit:
        return estimate(lo)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power_at(step, spec, model, mid, busy)[0] <= limit else (lo, mid)
    return estimate(lo)


def fit(rows: list[tuple[StepEstimate, devices.DeviceSpec, float, float | None]]) -> PowerModel:
    """The weight that best explains measured average power (W) of steps that ran below their
    power limit (least squares through the origin on the dynamic power); each row is
    ``(step, spec, watts, busy)`` with ``busy`` the measured busy share, or None (:func:`busy_share`)."""
    x, y = [], []
    for step, spec, watts, measured_busy in rows:
        idle, _ = board_power(spec)
        x.append(busy_share(step, busy=measured_busy)[0] * float(spec.peak_fp32_tflops or 0))
        y.append(watts - idle)
    a, b = np.array(x), np.array(y)
    return PowerModel(max(float(a @ b / (a @ a)), 0.0) if a @ a > 0 else None)


def fit_voltage_floor(model: PowerModel, rows: list[tuple[StepEstimate, devices.DeviceSpec, float, float, float]]
                      ) -> PowerModel:
    """``model`` with the voltage floor (on a grid over :data:`VOLTAGE_FLOORS`) that best reproduces
    measured slowdowns under power limits: least squares on log(predicted / measured). Each row is
    ``(step, spec, limit W, reference limit W, measured step time at the limit over that at the
    reference)``, the step answered as the product answers it (the step model's own busy share).
    Each row's power and time are tabulated once over clocks (a 0.5% grid) and every floor read
    off that table, not bisected again."""
    if not rows:
        return model
    clocks = np.linspace(LEAST_CLOCK, 1.0, 141)
    tables = []
    for step, spec, limit, reference, slowdown in rows:
        share, ms = np.array([busy_share(step, c) for c in clocks]).T
        idle, _ = board_power(spec)
        tables.append((idle, share * model.busy_w(spec), ms, limit, reference, slowdown))
    floors = np.linspace(*VOLTAGE_FLOORS, 71)
    loss = []
    for floor in floors:
        factor = clocks * np.maximum(clocks, floor) ** 2
        err = []
        for idle, dynamic, ms, limit, reference, slowdown in tables:
            power = idle + dynamic * factor
            at = [ms[int(np.flatnonzero(power <= cap).max(initial=0))] for cap in (limit, reference)]
            err.append(np.log(at[0] / at[1] / slowdown))
        loss.append(float(np.mean(np.square(err))))
    return replace(model, voltage_floor=float(floors[int(np.argmin(loss))]))


__all__ = ["VOLTAGE_FLOORS", "IDLE_SHARE", "UNCHECKED_BAND", "LEAST_CLOCK", "LOWEST_LIMIT_SHARE", "FITTED", "limit_refusal", "PowerModel",
           "PowerEstimate", "board_power", "power_basis", "answered_busy", "busy_share", "power_at", "step_power", "fit",
           "fit_voltage_floor"]
