"""Does the GAE pretraining earn its place where a device has few labels? Held-out families.

    .venv/bin/python experiments/scarce_labels.py [--device rtx3090-amp] [--target train_step_ms]
        [--sizes 25,50,100] [--seeds 1337,1338,1339] [--encoder /tmp/enc/encoder.pt]
        [--json PATH]

One device and target of the GPU evaluation (``trappm_ray.evaluate.gpu``): its families are
dealt into 5 groups (``family_groups``), each held out in turn; from the other families' rows
``N`` labels are drawn (per seed), 20% of them (at least 5) for epoch selection, and every
model is fitted on those only and tested on the held-out families' rows. Models, all predicting
log(measured / roofline floor) and clamped to the floor:

* ``gnn`` - the supervised GraphSAGE regressor (``nnlqp``: no encoder), v2 + roofline node
  features and the evaluation's graph-level vector: the baseline of this benchmark;
* ``gnn+gae`` - the same plus the frozen pretrained encoder's pooled embedding (``trappm-ray``);
* ``gnn+random`` - the same with a frozen randomly initialised encoder of the same shape;
* ``xgboost`` - the static baseline on the graph-level vector.

Prints MAPE per model and size, and each model's ratio to ``gnn`` measured in the same run. The
encoder (``--encoder``) is a ``pretrain_gae.py`` output (``encoder.pt`` + ``encoder.json``).
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import replace

import numpy as np
import torch

from trappm_ray.evaluate.gpu import GpuEvalConfig, family_groups, fit_predict
from trappm_ray.train.gpu_examples import examples, graph_index
from trappm_ray.train.gpu_predictor import gnn_inputs
from trappm_ray.graph.data import graph_data
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.train.pretrain import load_encoder
from trappm_ray.train.regressors import (RECIPES, embed, fit, predict_rows, prepare,
                                         random_encoder)

MODELS = ("gnn", "gnn+gae", "gnn+random", "xgboost")


def encoder_embeddings(ex: list[dict], index: dict, encoder) -> torch.Tensor:
    """``[len(ex), d]`` pooled embeddings of each example's graph (v2 node features only: the
    features the encoder was pretrained on); graphs shared by examples are embedded once."""
    keys = sorted({e["rkey"][:3] for e in ex})
    data = prepare([graph_data(row_to_graph(index[k]), "v2") for k in keys])
    emb = embed(encoder, data)
    at = {k: i for i, k in enumerate(keys)}
    return emb[[at[e["rkey"][:3]] for e in ex]]


def gnn(data, emb, embedding: str):
    """A model function for ``fit_predict``'s ``extra``: the GNN with ``embedding`` (or none)."""
    def run(ex, train, val, idx, seed) -> np.ndarray:
        ratio = np.array([e["measured"] / e["floor"] for e in ex])
        floor = np.array([e["floor"] for e in ex])
        recipe = RECIPES["nnlqp" if emb is None else "trappm-ray"]
        recipe = replace(recipe, batch_affine=False, max_epochs=80, patience=15, batch_size=16)
        out = fit(data, ratio, emb, train, val, recipe, seed)
        return predict_rows(out["model"], out["scaler"], data, emb, idx) * floor[idx]
    run.__name__ = embedding
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="rtx3090-amp")
    ap.add_argument("--target", default="train_step_ms")
    ap.add_argument("--sizes", default="25,50,100")
    ap.add_argument("--seeds", default="1337,1338,1339")
    ap.add_argument("--encoder", default="/tmp/enc/encoder.pt")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cfg = GpuEvalConfig(slugs=(args.device,))
    index = graph_index(cfg.labels, cfg.corpora)
    ex = [e for e in examples(cfg.labels, cfg.corpora, (args.device,), index)[0] if e["target"] == args.target]
    data = gnn_inputs(ex, index)
    encoder, _ = load_encoder(args.encoder)
    emb = encoder_embeddings(ex, index, encoder)
    rand = encoder_embeddings(ex, index, random_encoder(encoder, seed=0))
    extra = {"gnn": gnn(data, None, "none"), "gnn+gae": gnn(data, emb, "pretrained"),
             "gnn+random": gnn(data, rand, "random")}
    meas = np.array([e["measured"] for e in ex])
    groups = family_groups(ex, 5)
    fam = np.array([e["family"] for e in ex])
    sizes = [int(s) for s in args.sizes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{args.device}/{args.target}: {len(ex)} rows, {len(set(fam))} families, 5 family groups")
    results = {m: {n: [] for n in sizes} for m in MODELS}
    for n in sizes:
        for seed in seeds:
            for group in groups:
                test = np.flatnonzero(np.isin(fam, list(group)))
                rest = np.flatnonzero(~np.isin(fam, list(group)))
                pick = np.random.default_rng(seed).choice(rest, size=min(n, len(rest)), replace=False)
                n_val = max(5, n // 5)
                val, train = pick[:n_val], pick[n_val:]
                for m in MODELS:
                    out = fit_predict(ex, train, val, test, m, seed, extra)
                    results[m][n].append(np.abs(out["pred"] / meas[test] - 1))
        line = {m: 100 * float(np.mean(np.concatenate(results[m][n]))) for m in MODELS}
        print(f"N={n:4d}  " + "  ".join(f"{m} {v:6.1f}% ({v / line['gnn']:.2f}x gnn)"
                                         for m, v in line.items()), flush=True)
    summary = {m: {n: 100 * float(np.mean(np.concatenate(results[m][n]))) for n in sizes} for m in MODELS}
    print(f"wall {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "target": args.target, "sizes": sizes, "seeds": seeds,
                       "encoder": args.encoder, "mape": summary}, f, indent=1)


if __name__ == "__main__":
    main()
