"""Does the product read the RTX 3090 network where timm measured a model, and what does reading it
elsewhere cost? (issue 43)

    .venv/bin/python experiments/anchor_batch.py      (about 10 minutes; reads the examples
                                                       jobs/evaluate_unseen.py caches in artifacts/unseen)

On a GPU the product reads the learned answer at the *anchor* (``model/launch.anchor_batch``: the
largest power of two the CUDA memory model fits in the GPU's memory, at most the labels' largest
batch) and carries it to the batch asked with the step model. timm measured every model at the
largest batch that fit the 24 GB card, so the anchor should lie at or below that batch: above it,
the network answers at a batch no row of that model was measured at (its batch input is confounded
with model size: every model was measured at one batch). Families held out are scored at their own
batch (``evaluate/unseen.py``), so this path is not in those figures.

1. Per label graph (training, AMP fp16 + SGD momentum; attention fused as PyTorch 2 runs it, then
   eager as the labels' PyTorch 1 ran it, what the product now reads the anchor's fit in:
   ``model/launch.labels_fused_attention``), the memory model's ``device_used`` at the batch timm
   ran as a share of 24 GB (above 1: the model over-reads a step that ran), and how many anchors
   lie above the measured batch.
2. In-sample, NCHW rows whose anchor differs from their batch and whose graph re-binds to it by
   arithmetic (``graph/rebatch.at_batch``) or is held by the labels at that batch: the shipped
   network read at the row's batch, against it read at the anchor and carried by the step
   model's ratio (the product's path, before the class bounds).
"""
from __future__ import annotations

import collections
import json
import pickle

import numpy as np

from trappm_ray import devices
from trappm_ray.graph.rebatch import at_batch
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.model.device_features import SETTING_COLS
from trappm_ray.model.launch import anchor_batch, step_host_us
from trappm_ray.model.predictor import Predictor
from trappm_ray.physics.graph_walk import walk
from trappm_ray.physics.memory import guess_folded_norm, training_memory
from trappm_ray.physics.step_model import step_time
from trappm_ray.train.gpu_examples import graph_index

CACHE, PREDICTOR = "artifacts/unseen", "trappm_ray/predictors/rtx3090-amp"
SETTING = {"precision": "amp-fp16", "optimizer": "sgd-momentum"}
POWERS = 2 ** np.arange(11)


def main() -> None:
    ex = [e for e in pickle.load(open(f"{CACHE}/examples.pkl", "rb"))
          if e["slug"] == "rtx3090-amp" and e["target"] == "train_step_ms"]
    index = graph_index("data/labels", ())
    for fused in (True, False):
        print(f"\nthe anchor's fit read with attention {'fused (PyTorch 2)' if fused else 'eager (PyTorch 1, as the labels ran)'}:")
        read(ex, index, fused)


def read(ex: list[dict], index: dict, fused: bool) -> None:
    spec = devices.get("rtx3090")
    launch = json.loads(open(f"{PREDICTOR}/manifest.json").read())["launch"]
    memory = spec.memory_gb * 1e9
    used, family = {}, {}
    for e in ex:  # the memory model at every power of two, once per graph
        key = tuple(e["rkey"][:3])
        if key not in used:
            g = row_to_graph(index[key])
            walked = walk(g, guess_folded_norm(g), arithmetic=True)
            used[key] = np.array([training_memory(g, **SETTING, batch_size=int(b), walked=walked,
                                                  fused_attention=fused).device_used for b in POWERS])
            family[key] = e["family"]
    keys = list(used)
    batch = np.array([k[2] for k in keys])
    share = np.array([np.interp(np.log2(k[2]), np.arange(len(POWERS)), used[k]) for k in keys]) / memory
    fits = [int(POWERS[np.flatnonzero(used[k] <= memory).max()]) if (used[k] <= memory).any() else 0 for k in keys]
    anchor = np.array([anchor_batch(int(k[2]), f, launch) for k, f in zip(keys, fits)])
    print(f"{len(keys)} graphs; the memory model's device_used at the batch timm ran / 24 GB: "
          f"quantiles 5/25/50/75/95% {np.quantile(share, [.05, .25, .5, .75, .95]).round(2).tolist()}")
    print(f"read above 24 GB: {(share > 1).sum()} graphs, most by family "
          f"{collections.Counter(family[k] for k, s in zip(keys, share) if s > 1.1).most_common(6)}")
    print(f"anchor above the measured batch: {(anchor > batch).sum()} graphs ({(anchor >= 2 * batch).sum()} at 2x or more), "
          f"by family {collections.Counter(family[k] for k, a in zip(keys, anchor) if a > k[2]).most_common(6)}")

    net, host = Predictor.load(PREDICTOR), step_host_us(launch)
    anchors = dict(zip(keys, anchor))
    nchw = SETTING_COLS.index("nhwc")
    rows = []
    for e in ex:
        key = tuple(e["rkey"][:3])
        a, b = int(anchors[key]), int(key[2])
        if e["setting"][nchw] or a in (0, b):
            continue
        g = row_to_graph(index[key])
        ga = at_batch(g, a)
        if ga is None and (key[0], key[1], a) in index:  # a label graph of this model at the anchor's batch
            ga = row_to_graph(index[(key[0], key[1], a)])
        if ga is None:
            continue
        at_a, at_b = net.predict_graphs([ga, g], [{**SETTING, "memory_format": "nchw"}] * 2)
        ratio = step_time(g, spec, SETTING, "train", host).total_ms / step_time(ga, spec, SETTING, "train", host).total_ms
        rows.append((e["measured"], at_b["train_step_ms"], at_a["train_step_ms"] * ratio, a > b, e["arch"], b, a))
    m = np.array([r[:4] for r in rows], float)
    for name, col in (("network at the measured batch", 1), ("network at the anchor, carried by the step model", 2)):
        for part, mask in (("all", np.ones(len(m), bool)), ("anchor above", m[:, 3] > 0), ("anchor below", m[:, 3] == 0)):
            r = m[mask, col] / m[mask, 0]
            print(f"{name}, {part} ({mask.sum()} rows): MAPE {100 * np.mean(np.abs(r - 1)):.1f}%, "
                  f"p90 {100 * np.quantile(np.abs(r - 1), .9):.1f}%, ratio {r.min():.2f}-{r.max():.2f}")
    worst = min(rows, key=lambda r: r[2] / r[0])
    print(f"furthest through the anchor: {worst[4]} at batch {worst[5]} (anchor {worst[6]}): "
          f"{worst[2] / worst[0]:.2f}x measured, {worst[1] / worst[0]:.2f}x at its own batch")


if __name__ == "__main__":
    main()
