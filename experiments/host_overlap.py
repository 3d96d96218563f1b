"""Do the host's issue time and the GPU's time overlap in a training step as the step model's
queue says, or add up?

    .venv/bin/python experiments/host_overlap.py          (about 2 minutes)

The step model (:mod:`trappm_ray.physics.step_model`) issues kernels at ``HOST_US`` each and
ends a step at ``max_k(issue_k + device time of kernels k..n)``: a queue, where host and device
time overlap. This scores the physics alone, with no learned part, on two sets of measured
training steps it was not fitted on: the RTX 3090's timm labels (AMP, SGD with momentum, PyTorch
1.10-1.12; three NCHW rows per family) and the H200 campaign's rows (PyTorch 2.11; every setting
without checkpointing, accumulation or channels-last), as the queue and as the plain sum of host
and device time and as the larger of the two plus half the smaller, each with the host figure
as shipped and halved. Printed per set: MAPE, MAPE after one global scale (the shape of the
answer across models and batches, what a learned level cannot fix), the median of answer /
measured, the spread of the groups' (families', models') median log ratios and how many groups
stand more than 1.5x from the rest, and how the log of answer / measured follows the host's
share of the modelled step.
"""
import argparse
import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trappm_ray import devices
from trappm_ray.evaluate.campaign import campaign_rows, row_setting, setting_name
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.labels.store import ok_labels
from trappm_ray.physics.step_model import HOST_US, Setting, step_time

# (composition, share of the smaller of host and device time added to the larger): the queue,
# half of the smaller added (a partial overlap), all of it (no overlap)
COMPOSITIONS = {"queue": None, "half overlap": 0.5, "sum": 1.0}
VARIANTS = [(how, scale) for how in COMPOSITIONS for scale in (1.0, 0.5)]


def rtx3090_rows(labels: str, per_family: int) -> list[tuple]:
    """(family, measured ms, graph, spec, setting) of NCHW RTX 3090 training rows."""
    df = ok_labels(labels, "rtx3090-amp").to_pandas()
    df = df[df.train_step_ms.notna() & (df.memory_format == "nchw")].groupby("family").head(per_family)
    spec = devices.get(df.device_spec.iloc[0])
    # only the sampled architectures' graphs: the whole graph index takes ~10 GB
    table = pq.read_table(f"{labels}/graphs.parquet")
    table = table.filter(pc.is_in(table["arch"], value_set=pa.array(sorted(set(df.arch)))))
    index = {(r["arch"], r["resolution"], r["batch_size"]): r for r in table.to_pylist()}
    return [(p.family, p.train_step_ms, row_to_graph(index[k]), spec, Setting())
            for p in df.itertuples() if (k := (p.arch, p.resolution, p.batch_size)) in index]


def campaign_training_rows(labels: str) -> list[tuple]:
    """(model, measured ms, graph, spec, setting) of the GPU campaign's plain training rows (every
    campaign folder of the labels: today the H200's)."""
    return [(r["arch"], r["train_step_ms"], graph, devices.get(r["device_spec"]), row_setting(r))
            for r, graph in campaign_rows(labels, lambda r: r.get("train_step_ms"))
            if setting_name(r).count("/") == 2]  # no recompute / accumulation


def score(rows: list[tuple], how: str, scale: float) -> dict[str, float]:
    host = {k: v * scale for k, v in HOST_US.items()}
    logs = []
    for group, measured, graph, spec, setting in rows:
        est = step_time(graph, spec, setting, "train", host)
        added = COMPOSITIONS[how]
        answer = est.total_ms if added is None else \
            max(est.host_ms, est.device_ms) + added * min(est.host_ms, est.device_ms)
        logs.append((group, np.log(answer / measured), est.host_ms / est.total_ms))
    r = pd.DataFrame(logs, columns=["group", "log", "host_share"])
    centred = r.log - r.log.median()
    groups = r.groupby("group").log.median() - r.log.median()
    return {"MAPE %": np.abs(np.exp(r.log) - 1).mean() * 100, "after one scale %": np.abs(np.exp(centred) - 1).mean() * 100,
            "median ratio": float(np.exp(r.log.median())), "group log sd": float(groups.std()),
            "groups > 1.5x": int((groups.abs() > np.log(1.5)).sum()),
            "host share corr": float(np.corrcoef(r.log, r.host_share)[0, 1])}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--labels", default="data/labels")
    parser.add_argument("--per-family", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sets = {"RTX 3090 (families)": rtx3090_rows(args.labels, args.per_family), "H200 campaign (models)": campaign_training_rows(args.labels)}
    print("| set | rows | composition | host | MAPE | after one scale | median answer / measured | group log sd | groups > 1.5x "
          "| correlation of log answer / measured with the host's share |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rows in sets.items():
        for how, scale in VARIANTS:
            s = score(rows, how, scale)
            print(f"| {name} | {len(rows)} | {how} | x{scale:g} | {s['MAPE %']:.1f}% | {s['after one scale %']:.1f}% | "
                  f"{s['median ratio']:.2f} | {s['group log sd']:.3f} | {s['groups > 1.5x']} | {s['host share corr']:+.2f} |")
