"""Is the public batch sweeps' ratio error the host's speed? The step model issues kernels at the
host figures the GPU campaign measured on torch 2.11 (``physics/step_model.HOST_US``); Pollux's
and Gavel's one-GPU sweeps ran on 2019-2020 stacks, whose hosts are slower. If a slower host were
what the step model misses, one scale of every host figure per source would bring the batch
ratios t(b) / t(b_largest) in line (``docs/results-step-model.md``: Gavel 20.5%, Pollux 11.5%).

    .venv/bin/python experiments/sweep_host.py      (about 2 minutes; the sweeps' ONNX exports
                                                     are read from artifacts/workloads)

Every sweep answered by the step model alone with ``HOST_US`` times each scale in a grid; printed
per sweep the ratio MAPE at each scale, per source the MAPE with one scale for all its sweeps
(in-sample), and each workload answered at the scale chosen on the source's other workloads.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from trappm_ray import devices
from trappm_ray.evaluate.batch_scaling import WORKLOADS, one_gpu_sweeps, ratio_errors, workload_onnx
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics.step_model import HOST_US, Setting, step_time

SCALES = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


def main() -> None:
    cache = Path("artifacts/workloads")
    found = []  # (source, workload, {scale: |ratio errors|})
    for sweep in one_gpu_sweeps():
        onnx = workload_onnx(sweep.workload, cache)
        _, dims, optimizer = WORKLOADS[sweep.workload]
        spec, setting = devices.get(sweep.device), Setting(precision=sweep.precision, optimizer=optimizer)
        graphs = [featurize(onnx, b, dims=dims or None) for b in sweep.batches]
        per = {}
        for scale in SCALES:
            host = {k: v * scale for k, v in HOST_US.items()}
            pred = np.array([step_time(g, spec, setting, "train", host).total_ms for g in graphs])
            per[scale] = np.abs(ratio_errors(pred, np.array(sweep.measured_ms)))
        found.append((sweep.source, sweep.workload, per))
        print(f"{sweep.source} {sweep.workload} {sweep.device}: "
              + " ".join(f"x{s}:{100 * e.mean():.0f}%" for s, e in per.items()), flush=True)
    for source in sorted({s for s, _, _ in found}):
        sweeps = [(w, per) for s, w, per in found if s == source]

        def mape(pers, scale):
            return float(np.concatenate([p[scale] for p in pers]).mean() * 100)

        print(f"{source}, one scale for all: " + " ".join(f"x{s}:{mape([p for _, p in sweeps], s):.1f}%"
                                                        for s in SCALES))
        held = []
        for w in sorted({w for w, _ in sweeps}):
            rest, own = [p for v, p in sweeps if v != w], [p for v, p in sweeps if v == w]
            best = min(SCALES, key=lambda s: mape(rest, s))
            held += [p[best] for p in own]
            print(f"  {w}: scale x{best} chosen on the others -> {mape(own, best):.1f}% (x1: {mape(own, 1.0):.1f}%)")
        print(f"{source}, each workload at the others' scale: {100 * np.concatenate(held).mean():.1f}% "
              f"(x1: {mape([p for _, p in sweeps], 1.0):.1f}%)")


if __name__ == "__main__":
    main()
