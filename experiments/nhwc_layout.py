"""Why are the training steps furthest off on unseen families channels-last ones, and does a rule
or a kernel class of their own catch them?

    .venv/bin/python experiments/nhwc_layout.py      (seconds; reads data/labels and the fold
                                                      answers and layout shares jobs/evaluate_unseen.py
                                                      caches in artifacts/unseen)

1. The RTX 3090's labels measure many models in both layouts at one batch: NHWC / NCHW training
   step per (model, resolution, batch), by kind of model.
2. On the shipped recipe's answers with families held out (the GNN folds), how many of the
   answers off by more than 1.5x are NHWC, and the flag as a detector of errors above 50% with
   and without the layout rule (:func:`trappm_ray.model.correction.layout_risk`).
3. A kernel class of its own for grouped convolutions in NHWC (its own factor on the step model):
   the held answer and the physics answer, each fold's bounds refitted on its training rows.
4. What shipped instead (:mod:`trappm_ray.model.layout`): the NHWC / NCHW factor per layout kind of
   kernel, its error on each family's pairs with that family held out of the fit, beside reading
   NHWC as NCHW.
"""
from __future__ import annotations

import glob
import pickle

import numpy as np
import pandas as pd

from trappm_ray.evaluate import unseen as U
from trappm_ray.labels.store import ok_labels
from trappm_ray.model.correction import out_of_domain
from trappm_ray.model.device_features import SETTING_COLS
from trappm_ray.physics.kernel_classes import CLASSES
from trappm_ray.train.correction_fit import fit_bounds
from trappm_ray.train.layout_fit import family_out_log_errors, pairs

CACHE = "artifacts/unseen"
GROUPED = CLASSES.index("grouped-conv")
KINDS = {"ResNet-50": r"^resnet50$", "ResNeXt-50 32x4d": r"^resnext50_32x4d$", "EfficientNet-B*": r"^efficientnet_b\d$",
         "NFNet / NF-RegNet": r"nfnet|nf_regnet", "ResNeSt": r"^resnest", "RepVGG-g4": r"repvgg_b\dg4",
         "Visformer": r"visformer", "ResNeXt-101 32x16d+": r"resnext101_32x(?:16|32|48)d", "TResNet": r"^tresnet"}


def layouts() -> None:
    rows = ok_labels("data/labels", "rtx3090-amp").to_pandas()
    rows = rows[rows.train_step_ms.notna()]
    pairs = rows.pivot_table(index=["arch", "resolution", "batch_size"], columns="memory_format",
                             values="train_step_ms", aggfunc="first").dropna().reset_index()
    pairs["ratio"] = pairs.nhwc / pairs.nchw
    print(f"{len(pairs)} (model, resolution, batch) pairs measured in both layouts; NHWC / NCHW training step:")
    print("| models | pairs | median | min | max |\n|---|---|---|---|---|")
    for name, pattern in KINDS.items():
        m = pairs[pairs.arch.str.contains(pattern)]
        print(f"| {name} | {len(m)} | {m.ratio.median():.2f} | {m.ratio.min():.2f} | {m.ratio.max():.2f} |")
    print(f"| all | {len(pairs)} | {pairs.ratio.median():.2f} | {pairs.ratio.min():.2f} | {pairs.ratio.max():.2f} |")


def detector(a: U.Answers, flag: np.ndarray) -> str:
    held = np.clip(a.learned, a.low, a.high)
    big = np.abs(held / a.measured - 1) > 0.5
    return f"recall {100 * flag[big].mean():.0f}% / false alarms {100 * flag[~big].mean():.1f}%"


def folds() -> None:
    ex = [e for e in pickle.load(open(f"{CACHE}/examples.pkl", "rb")) if e["target"] == "train_step_ms"]
    step, shares = pickle.load(open(f"{CACHE}/physics-train_step_ms.pkl", "rb"))
    gnn = [pickle.load(open(f, "rb")) for f in sorted(glob.glob(f"{CACHE}/folds-train_step_ms-gnn-5-fold*.pkl"))]
    nhwc = np.array([e["setting"][SETTING_COLS.index("nhwc")] for e in ex], bool)
    a = U.answers(ex, gnn, step, shares)
    held, flag = U.held_answer(a)
    idx = np.concatenate([f["test"] for f in gnn]).astype(int)
    far = np.abs(np.log(held / a.measured)) > np.log(1.5)
    print(f"\nGNN folds: {far.sum()} answers off by more than 1.5x, {(far & nhwc[idx]).sum()} of them NHWC; "
          f"MAPE NCHW {100 * np.mean(np.abs(held / a.measured - 1)[~nhwc[idx]]):.1f}%, "
          f"NHWC {100 * np.mean(np.abs(held / a.measured - 1)[nhwc[idx]]):.1f}%")
    print(f"flag with the layout rule: {detector(a, flag)}; without: "
          f"{detector(a, out_of_domain(a.learned, a.physics, held, a.learned))}")
    # the split: NHWC rows' grouped-convolution share moves to a class of its own
    split = np.insert(shares, GROUPED + 1, np.where(nhwc, shares[:, GROUPED], 0.0), axis=1)
    split[nhwc, GROUPED] = 0.0
    measured = np.array([e["measured"] for e in ex])
    mid = np.exp(fit_bounds(split, measured / step).mid)
    print(f"its own class, fitted on every row: NCHW grouped convolutions {mid[GROUPED]:.2f}x the step model, "
          f"NHWC {mid[GROUPED + 1]:.2f}x")
    for name, s in (("7 classes", shares), ("NHWC grouped its own class", split)):
        b = U.answers(ex, gnn, step, s)
        h = np.clip(b.learned, b.low, b.high)
        print(f"{name}: held MAPE {100 * np.mean(np.abs(h / b.measured - 1)):.1f}%, physics MAPE "
              f"{100 * np.mean(np.abs(b.physics / b.measured - 1)):.1f}%")


def move() -> None:
    ex = [e for e in pickle.load(open(f"{CACHE}/examples.pkl", "rb")) if e["target"] == "train_step_ms"]
    shares = pickle.load(open(f"{CACHE}/layout-train_step_ms.pkl", "rb"))
    found = pairs(ex)
    y = np.log([ex[i]["measured"] / ex[j]["measured"] for i, j in found])
    family = np.array([ex[i]["family"] for i, _ in found])
    err = family_out_log_errors(shares[[j for _, j in found]], y, family)
    for name, e in (("NHWC = NCHW", y), ("the layout factor, each family held out", err)):
        a = np.abs(np.exp(-e) - 1)  # answer / measured - 1, as every MAPE here
        print(f"{name}: {len(a)} pairs, MAPE {100 * a.mean():.1f}%, p90 {100 * np.quantile(a, 0.9):.1f}%")


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    layouts()
    folds()
    move()
