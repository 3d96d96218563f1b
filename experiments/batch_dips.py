"""Does a GPU's training throughput ever fall as the batch grows, and does the step model say
where?

    .venv/bin/python experiments/batch_dips.py [--least-batch 16]     (about 2 minutes)

The step model quantizes a GEMM's tiles into waves over the SMs
(:func:`trappm_ray.physics.step_model.fill`), so between doublings of the batch its time per
sample can rise (a batch of 48 filling a last wave that 32 left empty). Issue 42 asks for a
throughput that never falls. This reads the GPU campaign's batch sweeps (every campaign folder of
the labels, today the H200's; batches 1, 2, 3, 4, 6, 8, 12, ...: every step between doublings
measured) and prints, for each adjacent pair of batches at or above ``--least-batch``, the
measured and the modelled change of time per sample, how often each rises, and whether they rise
at the same pairs.
"""
import argparse
import logging
from collections import defaultdict

import numpy as np

from trappm_ray import devices
from trappm_ray.evaluate.campaign import campaign_rows, row_setting, setting_name
from trappm_ray.physics.step_model import step_time

RISE = 0.005  # a change of time per sample counted as a rise (measurement noise is about this)


def sweeps(labels: str) -> dict[tuple, dict[int, tuple[float, float]]]:
    """(model, resolution, setting) -> batch -> (measured, modelled) training step ms."""
    out: dict[tuple, dict[int, tuple[float, float]]] = defaultdict(dict)
    for r, graph in campaign_rows(labels, lambda r: r.get("train_step_ms")):
        modelled = step_time(graph, devices.get(r["device_spec"]), row_setting(r), "train").total_ms
        out[(r["arch"], r["resolution"], setting_name(r))][r["batch_size"]] = (r["train_step_ms"], modelled)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--labels", default="data/labels")
    parser.add_argument("--least-batch", type=int, default=16)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    pairs = []
    for key, by_batch in sweeps(args.labels).items():
        bs = sorted(by_batch)
        for a, b in zip(bs, bs[1:]):
            if a >= args.least_batch:
                (ma, pa), (mb, pb) = by_batch[a], by_batch[b]
                pairs.append(((mb / b) / (ma / a) - 1, (pb / b) / (pa / a) - 1, key, a, b))
    m = np.array([(p[0], p[1]) for p in pairs])
    up_m, up_p = m[:, 0] > RISE, m[:, 1] > RISE
    print(f"{len(pairs)} adjacent batch pairs (batch >= {args.least_batch}); time per sample rises more than "
          f"{RISE:.1%}: measured at {up_m.sum()}, modelled at {up_p.sum()}, both at {(up_m & up_p).sum()}")
    print(f"largest rise: measured {m[:, 0].max():+.1%}, modelled {m[:, 1].max():+.1%}; "
          f"correlation of the changes {np.corrcoef(m[:, 0], m[:, 1])[0, 1]:.2f}")
    print("| measured | modelled | model, resolution, setting | batches |\n|---|---|---|---|")
    for mm, pp, key, a, b in sorted(pairs, key=lambda p: -max(p[0], p[1]))[:12]:
        print(f"| {mm:+.1%} | {pp:+.1%} | {key[0]}@{key[1]} {key[2]} | {a} -> {b} |")
