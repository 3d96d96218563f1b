"""Do the H200's two saturating kernels, added to the power fit, make it hold on Zeus's GPUs?

    .venv/bin/python experiments/power_kernels.py          (seconds; needs ../shared/data/public-power)

The power model's weights (:mod:`trappm_ray.physics.power`) are fitted on Zeus's training steps,
where the compute weight fits to 0. A lent H200 read two kernels that each saturate one part
(``data/measurements/h200-2026-11-27``): a bf16 GEMM at the 700 W cap with its SM clock at 1470 of
1980 MHz, a memory copy at 472 W. Here they join each leave-one-GPU-out fit as two rows (the
GEMM's at its throttled clock), weighted 1, 10 and 30 times a Zeus row, and the table prints the
held-out GPUs' power MAPE, the weights fitted on every row and what they answer for the kernels.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from trappm_ray import devices
from trappm_ray.evaluate import power as E
from trappm_ray.evaluate.batch_scaling import workload_onnx
from trappm_ray.physics import power as P
from trappm_ray.physics.step_model import StepEstimate

H200 = devices.get("h200-sxm-141gb")


def kernel(compute_us: float, memory_us: float) -> StepEstimate:
    """One kernel, issued with no host gap (the GPU busy throughout)."""
    return StepEstimate.of(np.zeros(1), np.array([compute_us]), np.array([memory_us]), np.array([1.0]), (1, 0, 0), 1.0)


# (step, spec, measured W, busy, SM clock share): the GEMM moves 3 x 8192^2 x 2 bytes (76 us at
# 4.8 TB/s per 1,000 us of compute at its 661 TFLOP/s); the copy does no arithmetic.
KERNELS = [(kernel(0.0, 1000.0), H200, 472.0, 1.0, 1.0),
           (kernel(1000.0, 76.0), H200, 691.0, 1.0, 1470 / 1980)]


def fit(zeus: list, kernels: list, weight: float) -> P.PowerModel:
    """:func:`trappm_ray.physics.power.fit` with clock-aware rows: Zeus's at full clock, the kernels' at theirs."""
    a, b = [], []
    for step, spec, watts, busy, clock in [(*r, 1.0) for r in zeus] + kernels:
        idle, tdp = P.board_power(spec)
        share, u_c, u_m, _ = P.drivers(step, clock, busy)
        w = weight if spec.slug == H200.slug else 1.0
        a.append([w * share * clock ** P.GAMMA, w * share * u_c * clock ** P.GAMMA, w * share * u_m])
        b.append(w * (watts - idle) / (tdp - idle))
    k, _ = nnls(np.array(a), np.array(b))
    return P.PowerModel(*map(float, k))


def main() -> None:
    rows = E.zeus_rows()
    stepped = E.steps(rows, lambda w: workload_onnx(w, Path("artifacts/workloads")))
    busy = E.measured_busy(rows, stepped)
    gpus = sorted({r.gpu for r in rows})
    print("| fit | " + " | ".join(f"{g} MAPE" for g in gpus) + " | weights k0 / kc / km (all rows) | copy, GEMM answered |")
    print("|---|" + "---|" * (len(gpus) + 2))
    for label, kernels, weight in [("Zeus only", [], 1.0), ("+ kernels x1", KERNELS, 1.0),
                                   ("+ kernels x10", KERNELS, 10.0), ("+ kernels x30", KERNELS, 30.0)]:
        cells = []
        for g in gpus:
            m = fit(E._fit_rows([r for r in rows if r.gpu != g], stepped, busy), kernels, weight)
            err = [P.step_power(stepped[E._key(r)], devices.get(r.gpu), m, r.limit_w, busy[E._key(r)]).power_w
                   / r.power_w - 1 for r in rows if r.gpu == g]
            cells.append(f"{100 * np.mean(np.abs(err)):.1f}%")
        m = fit(E._fit_rows(rows, stepped, busy), kernels, weight)
        answers = [P.step_power(s, H200, m, None, 1.0) for s, *_ in KERNELS]
        print(f"| {label} | " + " | ".join(cells) + f" | {m.k0:.2f} / {m.kc:.2f} / {m.km:.2f} | "
              + ", ".join(f"{e.power_w:.0f} W at clock {e.clock:.2f}" for e in answers) + " |")
    print("measured: copy 472 W at clock 1.00, GEMM 691 W at clock 0.74")


if __name__ == "__main__":
    main()
