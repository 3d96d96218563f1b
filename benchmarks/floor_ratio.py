"""How well does the ratio of two GPUs' roofline floors predict the ratio of their measured times?

    .venv/bin/python benchmarks/floor_ratio.py [--target rtx4090-amp] [--reference rtx3090-amp]
        [--pairs 400] [--seed 0] [--l2-speedup 4]

Reference transfer (``trappm_ray.model.transfer``) moves a time measured or predicted on one GPU to
another by floor(target) / floor(reference). This takes timm inference rows both GPUs measured at
the same architecture, resolution, batch and memory format (eager, PyTorch 2.4 on both sides),
samples ``--pairs`` of them, and prints the transfer's error (measured target time against the
reference's measured time x the floor ratio), overall and by the graph's compute-bound share on
the reference (``RooflineEstimate.compute_bound_share``), beside one variant measured in the same
run:

* ``floor`` - the floor ratio as shipped: the baseline;
* ``l2-chain`` - a node's reads of the tensor its producer wrote, where that tensor fits in the
  device's L2 (``l2_mb`` of ``data/devices.csv``), move ``--l2-speedup`` x faster than DRAM.

Rows: MAPE %, the median of measured ratio / floor ratio, the ratio of each variant's MAPE to
``floor``'s.
"""
from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trappm_ray import devices
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.labels.store import ok_labels
from trappm_ray.physics.roofline import roofline

KEY = ["arch", "resolution", "batch_size", "memory_format"]


def measured_pairs(labels: str, target: str, reference: str, n: int, seed: int) -> pd.DataFrame:
    """``n`` keys both devices measured, eager, PyTorch 2.4 on both sides."""
    side = []
    for slug in (target, reference):
        df = ok_labels(labels, slug).to_pandas()
        df = df[df.inference_ms.notna() & (df.compiled.fillna("none") == "none")
                & df.torch_version.fillna("").str.contains("2.4")]
        side.append(df[KEY + ["family", "inference_ms", "device_spec"]])
    pairs = side[0].merge(side[1], on=KEY, suffixes=("_t", "_r"))
    return pairs.sample(min(n, len(pairs)), random_state=seed)


def chain_floor(graph, est, l2_mb: float, speedup: float) -> float:
    """The inference floor less what reads of an L2-resident producer's output at ``speedup`` x
    DRAM would save (``speedup`` 1: the shipped floor)."""
    out_b = np.asarray(graph.out_bytes, float)
    src, dst = np.asarray(graph.edge_index)
    hit = np.zeros(len(out_b))
    fits = out_b[src] <= l2_mb * 2**20
    np.add.at(hit, dst[fits], out_b[src][fits])
    share = np.minimum(hit, est.bytes) / np.maximum(est.bytes, 1.0)
    faster = np.maximum(est.compute_ms, est.memory_ms * (1 - share * (1 - 1 / speedup)))
    return float(est.total_ms - (np.maximum(est.compute_ms, est.memory_ms) - faster).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--labels", default="data/labels")
    ap.add_argument("--target", default="rtx4090-amp")
    ap.add_argument("--reference", default="rtx3090-amp")
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--l2-speedup", type=float, default=4.0)
    args = ap.parse_args()
    pairs = measured_pairs(args.labels, args.target, args.reference, args.pairs, args.seed)
    spec_t, spec_r = devices.get(pairs.device_spec_t.iloc[0]), devices.get(pairs.device_spec_r.iloc[0])
    # only the sampled architectures' graphs: the whole graph index takes ~10 GB
    table = pq.read_table(f"{args.labels}/graphs.parquet")
    table = table.filter(pc.is_in(table["arch"], value_set=pa.array(sorted(set(pairs.arch)))))
    index = {(r["arch"], r["resolution"], r["batch_size"]): r for r in table.to_pylist()}
    rows = []
    for p in pairs.itertuples():
        row = index.get((p.arch, p.resolution, p.batch_size))
        if row is None:
            continue
        graph = row_to_graph(row)
        est_t, est_r = (roofline(graph, s, "amp-fp16", "infer", fused_attention=True) for s in (spec_t, spec_r))
        rows.append({"measured": p.inference_ms_t / p.inference_ms_r, "share": est_r.compute_bound_share,
                     "floor": est_t.total_ms / est_r.total_ms,
                     "l2-chain": chain_floor(graph, est_t, spec_t.l2_mb or 0, args.l2_speedup)
                     / chain_floor(graph, est_r, spec_r.l2_mb or 0, args.l2_speedup)})
    df = pd.DataFrame(rows)
    df["bin"] = pd.cut(df.share, [-0.01, 0.2, 0.4, 0.6, 0.8, 1.0])
    print(f"{args.target} from {args.reference}: {len(df)} pairs measured at the same key")
    base = None
    for variant in ("floor", "l2-chain"):
        ape = (df[variant] / df.measured - 1).abs() * 100
        base = base or ape.mean()
        by_bin = ", ".join(f"{b}: {ape[df.bin == b].mean():.1f}% (median measured/{variant} "
                           f"{np.exp(np.log(df.measured / df[variant])[df.bin == b].median()):.2f}, n {int((df.bin == b).sum())})"
                           for b in df.bin.cat.categories)
        print(f"{variant:9s} MAPE {ape.mean():.1f}% (ratio to floor {ape.mean() / base:.3f}); by compute-bound share: {by_bin}")


if __name__ == "__main__":
    main()
