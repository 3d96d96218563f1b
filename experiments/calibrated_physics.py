"""Can a step model with a few fitted efficiencies carry unmeasured families where the learned
answer fails (issue 43)? And how far from it may a learned correction go?

    .venv/bin/python experiments/calibrated_physics.py [--cache artifacts/step-parts.pkl]

RTX 3090 training steps (timm's labels, AMP fp16 + SGD momentum). Each row's step model
(:mod:`trappm_ray.physics.step_model`, the predictor's host figures) is split per kernel into
tensor-core compute, CUDA-core compute, memory traffic, the least kernel time and host issue
time; five scales on them (the shares of the peaks, of the bandwidth, the least kernel time and
the host's time per kernel) are fitted by a robust least squares on log(measured / model), once
on every row and once per family left out (each family alone). Printed: the error of the step
model as shipped, scaled by its median ratio, and calibrated (leave-one-family-out), per family
the worst; and the named models' calibrated answer beside the shipped product's.
"""
from __future__ import annotations

import argparse
import logging
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

import trappm_ray
from trappm_ray import devices
from trappm_ray.evaluate.campaign import GRAPH_KEY, joined_graphs
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.launch import step_host_us
from trappm_ray.physics.step_model import Efficiency, Setting, step_time
from trappm_ray.serving import api
from trappm_ray.serving.model_input import model_bytes

SETTING = Setting(precision="amp-fp16", optimizer="sgd-momentum")
HALF_TENSOR = Efficiency(tensor=Efficiency().tensor / 2)
NAMES = ("tensor", "vector", "bandwidth", "kernel", "host")


def parts(graph, spec, host) -> np.ndarray:
    """[5, entries]: tensor compute, vector compute, memory, least and host time (us) at unit scales."""
    a = step_time(graph, spec, SETTING, "train", host)
    b = step_time(graph, spec, SETTING, "train", host, HALF_TENSOR)
    tensor = b.compute_us > a.compute_us * 1.5
    e = Efficiency()
    return np.stack([np.where(tensor, a.compute_us * e.tensor, 0.0), np.where(tensor, 0.0, a.compute_us * e.vector),
                     a.memory_us * e.bandwidth, a.least_us / e.kernel_us, a.host_us])


class Rows:
    """Every row's parts concatenated, for a fast segmented queue."""

    def __init__(self, blocks: list[np.ndarray]):
        self.x = np.concatenate(blocks, 1)
        self.starts = np.cumsum([0] + [b.shape[1] for b in blocks])[:-1]
        self.sizes = np.array([b.shape[1] for b in blocks])

    def total_ms(self, theta: np.ndarray) -> np.ndarray:
        t, v, m, k, h = np.exp(theta)
        x = self.x
        device = np.maximum(np.maximum(x[0] / t + x[1] / v, x[2] / m), x[3] * k)
        host = x[4] * h
        issue = np.cumsum(host)
        issue -= np.repeat(issue[self.starts] - host[self.starts], self.sizes)
        rc = np.cumsum(device[::-1])[::-1]  # device time from k to the very end
        after = rc - np.repeat(np.r_[rc[self.starts[1:]], 0.0], self.sizes)
        return np.maximum.reduceat(issue + after, self.starts) / 1e3


def fit(rows: Rows, measured: np.ndarray, theta0: np.ndarray) -> np.ndarray:
    res = least_squares(lambda th: np.log(rows.total_ms(th) / measured), theta0, loss="soft_l1", f_scale=0.1,
                        bounds=(np.log([0.05, 0.05, 0.05, 0.2, 0.2]), np.log([1.0, 1.0, 1.0, 20.0, 5.0])))
    return res.x


def summary(err: np.ndarray) -> str:
    a = np.abs(err)
    return (f"MAPE {100 * a.mean():.1f}%, median {100 * np.median(a):.1f}%, p90 {100 * np.quantile(a, 0.9):.1f}%, "
            f"max {100 * a.max():.0f}%, rows > 50%: {np.sum(a > 0.5)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", default="data/labels/rtx3090-amp/labels.parquet")
    ap.add_argument("--cache", default="artifacts/step-parts.pkl")
    ap.add_argument("--models", default="hrnet_w18_small@128,hrnet_w18@64,hrnet_w32@64,resnet50@128")
    args = ap.parse_args()
    predictor = api.load_predictor(None, "rtx3090")
    spec, host = devices.resolve("rtx3090"), step_host_us(predictor.manifest.launch)
    if Path(args.cache).exists():
        keys, families, measured, blocks = pickle.loads(Path(args.cache).read_bytes())
    else:
        rows = [r for r in pd.read_parquet(args.labels).to_dict("records")
                if r["status"] == "ok" and r.get("train_step_ms") and np.isfinite(r["train_step_ms"])]
        graphs = joined_graphs("data/labels", rows)
        keys, families, measured, blocks = [], [], [], []
        for i, r in enumerate(rows):
            g = graphs.get(tuple(r[k] for k in GRAPH_KEY))
            if g is None:
                continue
            keys.append(tuple(r[k] for k in GRAPH_KEY))
            families.append(r["family"])
            measured.append(r["train_step_ms"])
            blocks.append(parts(g, spec, host))
            if i % 200 == 0:
                print(f"{i}/{len(rows)} rows", flush=True)
        Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
        Path(args.cache).write_bytes(pickle.dumps((keys, families, measured, blocks)))
    measured, families = np.asarray(measured), np.asarray(families)
    rows = Rows(blocks)
    e = Efficiency()
    shipped = np.log([e.tensor, e.vector, e.bandwidth, e.kernel_us, 1.0])
    base = rows.total_ms(shipped)
    print(f"{len(measured)} rows, {len(set(families))} families")
    print(f"step model as shipped: {summary(base / measured - 1)}")
    med = np.median(measured / base)
    print(f"x its median ratio {med:.2f}: {summary(base * med / measured - 1)}")
    theta = fit(rows, measured, shipped)
    print("fitted on every row: " + ", ".join(f"{n} {v:.3g}" for n, v in zip(NAMES, np.exp(theta)))
          + f"; {summary(rows.total_ms(theta) / measured - 1)}")
    lofo = np.zeros(len(measured))
    for fam in sorted(set(families)):
        out = families == fam
        keep = [b for b, o in zip(blocks, out) if not o]
        th = fit(Rows(keep), measured[~out], theta)
        lofo[out] = Rows([b for b, o in zip(blocks, out) if o]).total_ms(th)
    err = lofo / measured - 1
    print(f"calibrated, each family left out: {summary(err)}")
    ratio = pd.Series(lofo / measured).groupby(families).median()
    print("families' median ratio model/measured: worst " + ", ".join(
        f"{f} {ratio[f]:.2f}" for f in ratio.index[np.argsort(-np.abs(np.log(ratio.values)))[:8]]))
    print(f"families whose median is off by more than 1.5x: {int(np.sum(np.abs(np.log(ratio.values)) > np.log(1.5)))} of {len(ratio)}")
    for item in args.models.split(","):
        name, batch = item.split("@")
        data, _ = model_bytes(name, 224)
        g = featurize(data, int(batch))
        cal = Rows([parts(g, spec, host)]).total_ms(theta)[0]
        answer = trappm_ray.predict(data, int(batch), "rtx3090").train_step_ms.value
        print(f"{name:22s} b{batch:<4s} product {answer:8.1f} ms  calibrated step model {cal:8.1f} ms  ratio {answer / cal:5.2f}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
