"""What share of the TF32 peak do matrix products reach in ``tf32``? The step model read the GPU
campaign's TF32 transformer steps 22-52% short (median |error|) with the one tensor-core share
that fits its bf16 GEMMs (0.75); the phase table (``docs/results-campaign.md``) put the miss in the
device-bound forward and backward passes.

    .venv/bin/python experiments/tf32_matmul.py      (about 2 minutes on 2 cores)

For each share in a grid, the step model alone (no learned part) answers every TF32 training row
of the campaign; printed per model: median |error| and median signed error of the step time.
Then each model's share is chosen on the other models' rows (median |log error|, pooled) and
scored on its own: the share is fitted on one GPU's measurements (an H200), the check is on
models it was not chosen on.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from trappm_ray import devices
from trappm_ray.evaluate.campaign import campaign_rows, row_setting
from trappm_ray.physics.step_model import Efficiency, step_time

GRID = (0.75, 0.65, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3)


def main() -> None:
    spec = devices.get("h200-sxm-141gb")
    rows = list(campaign_rows("data/labels", lambda r: r["precision"] == "tf32"))
    errors: dict[tuple[str, float], list[float]] = {}
    for share in GRID:
        eff = replace(Efficiency(), tf32_matmul=share)
        for r, graph in rows:
            est = step_time(graph, spec, row_setting(r), eff=eff)
            errors.setdefault((r["arch"], share), []).append(float(np.log(est.total_ms / r["train_step_ms"])))
    models = sorted({m for m, _ in errors})
    print(f"{len(rows)} TF32 training rows, {len(models)} models; median |error| % (signed) per share")
    print("model | " + " | ".join(map(str, GRID)))
    for m in models:
        cells = [f"{100 * np.median(np.abs(np.expm1(errors[(m, s)]))):.0f} ({100 * np.expm1(np.median(errors[(m, s)])):+.0f})"
                 for s in GRID]
        print(f"{m} | " + " | ".join(cells))
    print("\nheld out | share chosen on the others | its median |error| % | at 0.75")
    for m in models:
        def pooled(s: float, m: str = m) -> float:
            return float(np.median(np.abs(np.concatenate([errors[(o, s)] for o in models if o != m]))))
        best = min(GRID, key=pooled)
        at = [100 * np.median(np.abs(np.expm1(errors[(m, s)]))) for s in (best, 0.75)]
        print(f"{m} | {best} | {at[0]:.0f} | {at[1]:.0f}")


if __name__ == "__main__":
    main()
