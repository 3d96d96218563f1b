"""How well does the ratio of two GPUs' roofline floors predict the ratio of their measured times?

    .venv/bin/python experiments/floor_ratio.py [--target rtx4090-amp] [--reference rtx3090-amp]
        [--pairs 400] [--seed 0] [--l2-speedup 4] [--any-torch]

Reference transfer (``trappm_ray.model.floor_ratio``) moves a time measured or predicted on one GPU to
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
``floor``'s. ``--any-torch`` keeps rows of any PyTorch versions (a label row's time is averaged over
the versions it was measured in), samples ``--pairs`` per class of the reference row's versions
(PyTorch 1 only, 1 and 2, 2 only) and also prints the MAPE by class.
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


def torch_class(versions: str) -> str:
    """A label row's PyTorch versions (``1.12;2.4.0``): ``1 only``, ``1 and 2`` or ``2 only``."""
    majors = {v.split(".")[0] for v in (versions or "").split(";") if v}
    return "2 only" if majors == {"2"} else "1 and 2" if "2" in majors else "1 only"


def measured_pairs(labels: str, target: str, reference: str, n: int, seed: int, any_torch: bool = False
                   ) -> pd.DataFrame:
    """``n`` keys both devices measured, eager, PyTorch 2.4 on both sides (``any_torch``: any
    versions, ``n`` per :func:`torch_class` of the reference row)."""
    side = []
    for slug in (target, reference):
        df = ok_labels(labels, slug).to_pandas()
        df = df[df.inference_ms.notna() & (df.compiled.fillna("none") == "none")
                & (any_torch or df.torch_version.fillna("").str.contains("2.4"))]
        side.append(df[KEY + ["family", "inference_ms", "device_spec", "torch_version"]])
    pairs = side[0].merge(side[1], on=KEY, suffixes=("_t", "_r"))
    pairs["torch_r"] = pairs.torch_version_r.map(torch_class)
    return pd.concat([d.sample(min(n, len(d)), random_state=seed)
                      for _, d in pairs.groupby("torch_r" if any_torch else np.zeros(len(pairs)))])


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
    ap.add_argument("--any-torch", action="store_true",
                    help="any PyTorch versions, --pairs per reference row's class; MAPE by class")
    args = ap.parse_args()
    pairs = measured_pairs(args.labels, args.target, args.reference, args.pairs, args.seed, args.any_torch)
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
                     "torch_r": p.torch_r,
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
        if args.any_torch:
            print("  by the reference row's PyTorch versions: " + ", ".join(
                f"{c}: {ape[df.torch_r == c].mean():.1f}% (median measured/{variant} "
                f"{np.exp(np.log(df.measured / df[variant])[df.torch_r == c].median()):.2f}, n {int((df.torch_r == c).sum())})"
                for c in sorted(set(df.torch_r))))


if __name__ == "__main__":
    main()
