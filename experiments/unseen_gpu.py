"""The product's answer for a GPU it has no labels of, against that GPU's measurements.

    .venv/bin/python experiments/unseen_gpu.py [--target rtx4090-amp] [--max-rows 0] [--json PATH]

The RTX 4090 is given as a user's spec (``--device-spec``: every target goes through reference
transfer from the shipped RTX 3090 predictor, none of the RTX 4090's labels is used for a value),
and each of its eager inference rows (``--target``'s label folder, torch.compile runs left out: a
setting the product does not offer) is predicted from the row's graph in ``data/labels/graphs.parquet``
with the spec-based predictor's ``predict_graphs`` (the raw rows: no batch envelope, which leaves
batches of 128 and more alone). Two variants, measured in the same run:

* ``reference`` - the RTX 3090 predictor's answer x the floor ratio (no measurements): the baseline;
* ``anchored`` - the product as shipped: where the RTX 3090's labels measured the same graph at a
  batch within 2x (``trappm_ray/model/anchors.py``), that measurement moved instead.

The RTX 3090 predictor was trained on every RTX 3090 architecture, so this is the case of a
model the reference GPU knows, on a GPU nobody labeled; the evaluation's leave-one-device-out rows
(``docs/results-gpu.md``) also score architectures the reference never saw. Prints MAPE, median
APE and 95% band coverage per variant, over all rows and over the anchored rows, and the ratio of
each to ``reference``.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trappm_ray import devices
from trappm_ray.graph.rows import GRAPH_COLUMNS, row_to_graph
from trappm_ray.labels.store import ok_labels
from trappm_ray.model.anchors import MeasuredAnchors
from trappm_ray.model.spec_model import SpecPredictor
from trappm_ray.serving import routing

CHUNK = 100  # graph rows in memory at once (the whole graph file takes ~10 GB)


def eager_rows(labels: str, target: str, max_rows: int) -> list[dict]:
    rows = [r for r in ok_labels(labels, target).to_pylist()
            if r.get("inference_ms") and (r.get("compiled") or "none") == "none" and (r.get("gpus") or 1) == 1]
    rows.sort(key=lambda r: (r["arch"], r["resolution"], r["batch_size"], r.get("memory_format") or ""))
    return rows[:max_rows] if max_rows else rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--labels", default="data/labels")
    ap.add_argument("--target", default="rtx4090-amp")
    ap.add_argument("--max-rows", type=int, default=0, help="first N rows (0: all)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = eager_rows(args.labels, args.target, args.max_rows)
    spec = devices.get(rows[0]["device_spec"])
    ref_path = routing.reference_path(spec)
    ref = routing.load_predictor(str(ref_path))
    anchors = MeasuredAnchors.load(ref_path)
    model = routing.spec_model()
    variants = {"reference": SpecPredictor(model, spec, user_spec=True, reference=ref),
                "anchored": SpecPredictor(model, spec, user_spec=True, reference=ref, anchors=anchors)}
    keys = sorted({(r["arch"], r["resolution"], r["batch_size"]) for r in rows})
    got = {v: {} for v in variants}
    for start in range(0, len(keys), CHUNK):
        chunk = set(keys[start:start + CHUNK])
        table = pq.read_table(f"{args.labels}/graphs.parquet", columns=["arch", *GRAPH_COLUMNS],
                              filters=pc.field("arch").isin(sorted({k[0] for k in chunk})))
        index = {(r["arch"], r["resolution"], r["batch_size"]): r for r in table.to_pylist()}
        present = chunk & index.keys()
        mine = [(i, r) for i, r in enumerate(rows) if (r["arch"], r["resolution"], r["batch_size"]) in present]
        graphs = [row_to_graph(index[(r["arch"], r["resolution"], r["batch_size"])]) for _, r in mine]
        settings = [{"precision": r["precision"], "memory_format": r.get("memory_format") or "nchw",
                     "optimizer": "sgd-momentum", "interval_z": 1.96} for _, r in mine]
        for name, predictor in variants.items():
            for (i, _), out in zip(mine, predictor.predict_graphs(graphs, settings)):
                got[name][i] = out
        print(f"{min(start + CHUNK, len(keys))}/{len(keys)} graphs, {time.perf_counter() - t0:.0f} s", flush=True)
    done = sorted(got["reference"])
    meas = np.array([rows[i]["inference_ms"] for i in done])
    anchored = np.array(["inference_ms_measured_batch" in got["anchored"][i] for i in done])
    report = {"target": args.target, "reference": ref.manifest.name, "rows": len(done),
              "anchored_rows": int(anchored.sum()), "anchors": len(anchors) if anchors else 0, "variants": {}}
    for name in variants:
        out = [got[name][i] for i in done]
        pred = np.array([o["inference_ms"] for o in out])
        lo, hi = (np.array([o[f"inference_ms_{e}"] for o in out]) for e in ("low", "high"))
        ape = np.abs(pred / meas - 1) * 100
        report["variants"][name] = {
            "mape": float(ape.mean()), "median_ape": float(np.median(ape)),
            "coverage95": float(np.mean((meas >= lo) & (meas <= hi))),
            "mape_anchored_rows": float(ape[anchored].mean()) if anchored.any() else None,
            "mape_other_rows": float(ape[~anchored].mean()) if (~anchored).any() else None}
    base = report["variants"]["reference"]["mape"]
    print(f"{args.target} as an unseen GPU ({report['rows']} eager inference rows, {report['anchored_rows']} "
          f"anchored on {report['reference']}'s {report['anchors']} measurements), {time.perf_counter() - t0:.0f} s")
    print(f"{'variant':<10} {'MAPE %':>7} {'median':>7} {'cov95':>6} {'anchored rows':>14} {'others':>7} {'/ reference':>12}")
    for name, v in report["variants"].items():
        fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
        print(f"{name:<10} {v['mape']:>7.1f} {v['median_ape']:>7.1f} {v['coverage95']:>6.2f} "
              f"{fmt(v['mape_anchored_rows']):>14} {fmt(v['mape_other_rows']):>7} {v['mape'] / base:>12.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
