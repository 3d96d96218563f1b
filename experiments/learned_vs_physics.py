"""How far the learned answer departs from the physics alone, on a GPU's own training rows and on
named timm models (issue 43: a multi-resolution family read 2.5-3.7x too slow).

    .venv/bin/python experiments/learned_vs_physics.py [--device rtx3090] [--models hrnet_w18_small@128,resnet50@128]

Prints, for the device's shipped predictor: the quantiles of measured / step model over its own
training-step labels (how much the physics misses on rows it was trained on), then per named
model the predictor's networks alone at that batch, the product's training step (the networks'
answer held within the correction bounds, moved from its anchor), the step model's, and the
networks' ratio to the step model.
"""
from __future__ import annotations

import argparse
import logging

import numpy as np
import pandas as pd

import trappm_ray
from trappm_ray import devices
from trappm_ray.evaluate.campaign import GRAPH_KEY, joined_graphs
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.launch import step_host_us
from trappm_ray.physics.step_model import Setting, step_time
from trappm_ray.serving import api
from trappm_ray.serving.model_input import model_bytes

SETTING = Setting(precision="amp-fp16", optimizer="sgd-momentum")  # timm's, the RTX 3090 labels'
MODELS = ("hrnet_w18_small@128,hrnet_w18@64,hrnet_w32@64,resnet50@128,convnext_tiny@128,efficientnet_b0@128,"
          "vit_base_patch16_224@64,regnety_016@128,densenet121@64")

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--labels", default="data/labels/rtx3090-amp/labels.parquet")
    ap.add_argument("--models", default=MODELS)
    args = ap.parse_args()
    predictor = api.load_predictor(None, args.device)
    spec, host = devices.resolve(args.device), step_host_us(predictor.manifest.launch)
    rows = [r for r in pd.read_parquet(args.labels).to_dict("records")
            if r["status"] == "ok" and r.get("train_step_ms") and np.isfinite(r["train_step_ms"])]
    graphs = joined_graphs("data/labels", rows)
    ratio = np.array([r["train_step_ms"] / step_time(g, spec, SETTING, "train", host).total_ms
                      for r in rows if (g := graphs.get(tuple(r[k] for k in GRAPH_KEY))) is not None])
    print(f"{len(ratio)} training rows, measured / step model: " + ", ".join(
        f"p{q * 100:g} {np.quantile(ratio, q):.2f}" for q in (0.005, 0.05, 0.5, 0.95, 0.99)) + f", max {ratio.max():.2f}")
    for item in args.models.split(","):
        name, batch = item.split("@")
        data, _ = model_bytes(name, 224)
        physics = step_time(featurize(data, int(batch)), spec, SETTING, "train", host).total_ms
        graph = featurize(data, int(batch))
        networks = predictor.predict_graphs([graph], [SETTING.__dict__])[0]["train_step_ms"]
        answer = trappm_ray.predict(data, int(batch), args.device).train_step_ms.value
        print(f"{name:24s} b{batch:<4s} networks alone {networks:8.1f} ms  product {answer:8.1f} ms  "
              f"step model {physics:8.1f} ms  networks / step model {networks / physics:5.2f}")
