"""Batch consistency of predictions: how often an answer gets cheaper as the batch doubles.

    .venv/bin/python experiments/batch_consistency.py [--devices rtx3090,a100-sxm4-40gb,cpu]
                                                     [--files 'data/sample/onnx/*.onnx']
                                                     [--max-batch 256] [--json PATH]

For every file, device and batch 1, 2, 4, ... ``--max-batch``: the predictor's raw rows
(``predict_graphs`` on the featurized graphs: the baseline) and the answers of the public API
(``predict_many``, which holds them to the batch envelope), measured in the same run. Counts, per
device and target, the adjacent pairs (b, 2b) where the value fell (t(b) > t(2b)) or more than
doubled (t(2b) > 2 t(b)), the ratio of training step to inference at batch 1 (median and
largest over the files; on the RTX 3090's labels the measured per-sample ratio has median 3.6 and
99th percentile 12.4), and the wall time of both paths (the envelope's price: the extra batches
it predicts).
"""
from __future__ import annotations

import argparse
import glob
import json
import statistics
import time

from trappm_ray.graph.onnx_io import read_model
from trappm_ray.serving import api
from trappm_ray.serving.model_input import featurize_with
from trappm_ray.serving.routing import settled

TARGETS = ("train_step_ms", "inference_ms")


def violations(series: list[float]) -> tuple[int, int, int]:
    """(pairs, fell, more than doubled) over adjacent values of ``series`` (batches b, 2b, ...)."""
    pairs = list(zip(series, series[1:]))
    tol = 1 + 1e-6
    return (len(pairs), int(sum(a > c * tol for a, c in pairs)), int(sum(c > 2 * a * tol for a, c in pairs)))


def run_device(device: str, files: list[str], batches: list[int]) -> dict:
    """Raw and enveloped series of every file on ``device`` ("cpu": the default predictor)."""
    predictor = api.load_predictor(None, None if device == "cpu" else device, None)
    out = {t: {"raw": [0, 0, 0], "api": [0, 0, 0]} for t in TARGETS}
    at_1: dict[str, list[float]] = {"raw": [], "api": []}  # training step / inference at batch 1
    raw_s = api_s = 0.0
    for f in files:
        data, label = api.model_bytes(f)
        items = [(data, api.PredictOptions(b), label) for b in batches]
        start = time.perf_counter()
        chosen, setting = settled({}, predictor)
        proto = read_model(data)
        graphs = [featurize_with(proto, opts) for _, opts, _ in items]
        raw = chosen.predict_graphs(graphs, [setting] * len(graphs))
        raw_s += time.perf_counter() - start
        start = time.perf_counter()
        answers = api.predict_many(items, predictor)
        api_s += time.perf_counter() - start
        if all(t in raw[0] for t in TARGETS):
            at_1["raw"].append(raw[0]["train_step_ms"] / raw[0]["inference_ms"])
            at_1["api"].append(answers[0].train_step_ms.value / answers[0].inference_ms.value)
        for t in TARGETS:
            if t not in raw[0]:
                continue
            got = [getattr(a, t).value for a in answers]
            for key, series in (("raw", [r[t] for r in raw]), ("api", got)):
                out[t][key] = [x + y for x, y in zip(out[t][key], violations(series))]
    return {"targets": out, "train_over_inference_b1": at_1, "raw_s": raw_s, "api_s": api_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="rtx3090,a100-sxm4-40gb,cpu")
    ap.add_argument("--files", default="data/sample/onnx/*.onnx")
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    files = sorted(glob.glob(args.files))
    batches = [2 ** i for i in range(args.max_batch.bit_length()) if 2 ** i <= args.max_batch]
    results = {d: run_device(d, files, batches) for d in args.devices.split(",")}
    print(f"{len(files)} files, batches {batches[0]}..{batches[-1]}")
    print(f"{'device':16} {'target':14} {'pairs':>5} {'fell raw':>8} {'fell api':>8} "
          f"{'x2+ raw':>7} {'x2+ api':>7}")
    for d, r in results.items():
        for t, c in r["targets"].items():
            if c["raw"][0]:
                print(f"{d:16} {t:14} {c['raw'][0]:5d} {c['raw'][1]:8d} {c['api'][1]:8d} "
                      f"{c['raw'][2]:7d} {c['api'][2]:7d}")
        r1 = r["train_over_inference_b1"]
        if r1["raw"]:
            print(f"{d:16} train/inference at batch 1: raw median {statistics.median(r1['raw']):.1f} "
                  f"max {max(r1['raw']):.1f}; api median {statistics.median(r1['api']):.1f} max {max(r1['api']):.1f}")
        print(f"{d:16} wall: raw {r['raw_s']:.1f} s, api {r['api_s']:.1f} s "
              f"({r['api_s'] / max(r['raw_s'], 1e-9):.2f}x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
