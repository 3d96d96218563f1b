"""Which regressor should the reference GPU's times come from, for a GPU without labels?

    .venv/bin/python experiments/transfer_reference.py [--folds 3] [--seed 1337]
        [--json PATH]

Leave one device out on timm's inference rows (RTX 3090 and RTX 4090): the held-out GPU's rows are
predicted by reference transfer from the other (``trappm_ray.evaluate.gpu_floor_ratio``: the
reference's predicted time x floor(held-out) / floor(reference)), with the reference's time from

* ``xgboost`` - XGBoost on the device-aware vector (the evaluation's reference regressor): the
  baseline of this benchmark;
* ``gnn`` - the shipped GPU predictors' recipe (the physics-informed GNN of
  ``trappm_ray.train.gpu_predictor``), i.e. what the product uses as the reference.

Both are cross-fitted by architecture with the same ``--folds`` folds: a test row's architecture
is never among the rows its reference was fitted on. Prints MAPE and 95% coverage per held-out GPU
and model, and the ratio of each to ``xgboost`` measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np
import torch

from trappm_ray.evaluate.gpu_floor_ratio import transfer_predict
from trappm_ray.train.gpu_examples import examples, graph_index

TIMM = ("rtx3090-amp", "rtx4090-amp")
MODELS = ("xgboost", "gnn")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--labels", default="data/labels")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    index = graph_index(args.labels, ())
    ex = [e for e in examples(args.labels, (), TIMM, index)[0] if e["target"] == "inference_ms"]
    out = {}
    for held in sorted({e["spec"] for e in ex}):
        test = np.array([i for i, e in enumerate(ex) if e["spec"] == held], int)
        rest = np.array([i for i, e in enumerate(ex) if e["spec"] != held], int)
        out[held] = {}
        for model in MODELS:
            t1 = time.perf_counter()
            moved = transfer_predict(ex, held, rest, test, index, args.seed, model, args.folds)
            meas = np.array([ex[i]["measured"] for i in moved["rows"]])
            out[held][model] = {"mape": float(np.mean(np.abs(moved["pred"] / meas - 1)) * 100),
                                "coverage95": float(np.mean((meas >= moved["lo"]) & (meas <= moved["hi"]))),
                                "rows": int(len(meas)), "reference": moved["reference"],
                                "seconds": round(time.perf_counter() - t1, 1)}
        base = out[held]["xgboost"]["mape"]
        print(f"held out {held} (reference {out[held]['xgboost']['reference']}, {out[held]['xgboost']['rows']} rows): "
              + "  ".join(f"{m} {v['mape']:.1f}% ({v['mape'] / base:.2f}x xgboost, coverage {v['coverage95']:.0%}, "
                          f"{v['seconds']:.0f} s)" for m, v in out[held].items()), flush=True)
    print(f"wall {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"folds": args.folds, "seed": args.seed, "results": out}, f, indent=1)


if __name__ == "__main__":
    main()
