"""Does splitting a busy GPU's power into compute- and memory-bound activity hold on Zeus's GPUs,
with and without the H200's two saturating kernels in the fit?

    .venv/bin/python experiments/power_kernels.py          (seconds; reads data/labels-power)

The shipped power model (:mod:`trappm_ray.physics.power`) gives a busy GPU ``w x F32`` watts
above idle at full clock, one weight for every kernel. A lent H200 read two kernels that each
saturate one part (``data/measurements/h200-2026-11-27``): a bf16 GEMM at the 700 W cap with its
SM clock at 1470 of 1980 MHz, a memory copy at 472 W. Here the busy power is split as
``F32 x (a0 + ac u_c) x s^3 + BW x am x u_m`` (u_c, u_m: the step's compute and memory saturation,
BW in TB/s), fitted by non-negative least squares on Zeus's rows below their limit, alone and
with the kernels weighted 10 Zeus rows each; the table prints the held-out GPUs' power MAPE on
the GPU-bound workloads as the product answers them, and what the fit on every row answers for
the two kernels.
"""
from __future__ import annotations


import numpy as np
from scipy.optimize import nnls

from trappm_ray import devices
from trappm_ray.evaluate import power as E
from trappm_ray.physics import power as P
from trappm_ray.physics.step_model import StepEstimate

CLOCK_LAW = 3.0  # dynamic power ~ clock^3: the law this split was tried under (the model now has a voltage floor)
H200 = devices.get("h200-sxm-141gb")


def kernel(compute_us: float, memory_us: float) -> StepEstimate:
    """One kernel, issued with no host gap (the GPU busy throughout)."""
    return StepEstimate.of(np.zeros(1), np.array([compute_us]), np.array([memory_us]), np.array([1.0]), (1, 0, 0), 1.0)


# (step, spec, measured W, busy, SM clock share): the GEMM moves 3 x 8192^2 x 2 bytes (76 us at
# 4.8 TB/s per 1,000 us of compute at its 661 TFLOP/s); the copy does no arithmetic.
KERNELS = [(kernel(0.0, 1000.0), H200, 472.0, 1.0, 1.0),
           (kernel(1000.0, 76.0), H200, 691.0, 1.0, 1470 / 1980)]


def terms(step: StepEstimate, spec: devices.DeviceSpec, clock: float, busy: float | None) -> np.ndarray:
    """The split's three regressors of one step (W per weight unit)."""
    share, _ = P.busy_share(step, clock, busy)
    device = step.at_clock(clock)
    u_c = float(np.minimum(step.compute_us / clock, device).sum() / device.sum())
    u_m = float(np.minimum(step.memory_us, device).sum() / device.sum())
    f32 = float(spec.peak_fp32_tflops or 0)
    return share * np.array([f32 * clock ** CLOCK_LAW, f32 * u_c * clock ** CLOCK_LAW, spec.memory_bw_gbs / 1e3 * u_m])


def answer(k: np.ndarray, step: StepEstimate, spec: devices.DeviceSpec, limit: float) -> float:
    """Average W under ``limit``: the highest clock whose power meets it (bisection)."""
    idle, _ = P.board_power(spec)
    watts = lambda clock: idle + float(terms(step, spec, clock, None) @ k)  # noqa: E731
    if watts(1.0) <= limit:
        return watts(1.0)
    lo, hi = P.LEAST_CLOCK, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if watts(mid) <= limit else (lo, mid)
    return watts(lo)


def fit(zeus: list, kernels: list) -> np.ndarray:
    a, b = [], []
    for step, spec, watts, busy, clock, w in [(*r, 1.0, 1.0) for r in zeus] + [(*r, 10.0) for r in kernels]:
        a.append(w * terms(step, spec, clock, busy))
        b.append(w * (watts - P.board_power(spec)[0]))
    return nnls(np.array(a), np.array(b))[0]


def main() -> None:
    rows = E.zeus_rows()
    stepped = E.steps(rows, E.row_graphs(E.LABELS, rows))
    busy = E.measured_busy(rows, stepped)
    gpus = sorted({r.gpu for r in rows})
    print("| fit | " + " | ".join(f"{g} MAPE" for g in gpus) + " | a0 / ac / am (all rows) | copy, GEMM answered |")
    print("|---|" + "---|" * (len(gpus) + 2))
    for label, kernels in (("split, Zeus only", []), ("split + kernels x10", KERNELS)):
        cells = []
        for g in gpus:
            k = fit(E._fit_rows([r for r in rows if r.gpu != g], stepped, busy), kernels)
            err = [answer(k, stepped[E._key(r)], devices.get(r.gpu), r.limit_w) / r.power_w - 1
                   for r in rows if r.gpu == g and r.workload in E.GPU_BOUND]
            cells.append(f"{100 * np.mean(np.abs(err)):.1f}%")
        k = fit(E._fit_rows(rows, stepped, busy), kernels)
        got = [answer(k, s, H200, H200.tdp_w) for s, *_ in KERNELS]
        print(f"| {label} | " + " | ".join(cells) + f" | {' / '.join(f'{x:.1f}' for x in k)} | "
              + ", ".join(f"{w:.0f} W" for w in got) + " |")
    print("measured: copy 472 W, GEMM 691 W (at the cap); the shipped model: docs/results-power.md")


if __name__ == "__main__":
    main()
