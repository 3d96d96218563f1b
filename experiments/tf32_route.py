"""Where no label of a GPU holds TF32 or fp32, should the spec-based answer be its own, or its
reference's AMP answer moved by the step model (as the 16-bit precisions are)?

    .venv/bin/python experiments/tf32_route.py      (about 12 minutes on 2 cores)

Checked on the GPU campaign's TF32 and fp32 rows (an H200: no predictor has labels of it), through
``trappm_ray.predict`` as a user asks, once with each route (``routing.MOVED_FROM_AMP`` with and
without the precision). Printed per precision, target and route: rows, median and mean |error|,
p90, the median signed error and the 95% band's coverage, for every row and for batch >= 32.
Answered (2026-11-30): TF32 moves (training 22.6 -> 19.4% median, inference 31.3 -> 24.4%), fp32
keeps its own (10.5% against 10.8%). Rerun on 2026-12-02 (2.6 min) with the strict-FP32 convnet
rows left out (ResNet-50's and ViT-B/16's: no fp32 the product answers), on the 24 BERT and GPT-2
fp32 rows: own 5.8% training (p90 15.7%), 11.1% inference, against 10.7% and 18.1% moved; TF32
moved 20.4% / 21.8% against its own 23.5% / 30.6%. The routes stand.

Then what the move does where the two derivations disagree in level: for six models on six GPUs
at batch 8, 64 and 256 (AdamW), how many TF32 answers moved from AMP read slower than the same
model's fp32 answer, and by how much (``held_at`` then holds them at fp32's).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

import trappm_ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))
from evaluate_campaign import product_answer  # noqa: E402  (a job's function: the answer a user gets)

from trappm_ray.evaluate.campaign import as_measured, joined_graphs  # noqa: E402
from trappm_ray.labels.examples import GRAPH_KEY  # noqa: E402
from trappm_ray.labels.store import ok_labels  # noqa: E402
from trappm_ray.model.compositions import held_at  # noqa: E402
from trappm_ray.serving import api, routing  # noqa: E402

FOLDERS = ("h200-sxm-141gb-tf32", "h200-sxm-141gb-fp32")
MODELS = ("resnet50", "vit_base_patch16_224", "convnext_tiny", "efficientnet_b0", "swin_tiny_patch4_window7_224",
          "data/sample/onnx/densenet121@64.onnx")
GPUS = ("l4", "a10", "a100", "h100", "rtx4090", "rtx3090")
TARGETS = ("train_step_ms", "inference_ms")


def answers() -> pd.DataFrame:
    """One row per (measured row, route, target): error and whether the band covers."""
    shipped, out = routing.MOVED_FROM_AMP, []
    sixteen = tuple(p for p in shipped if p not in ("tf32", "fp32"))
    answer = as_measured(product_answer)  # strict-FP32 convnet rows are no fp32 the product answers
    for folder in FOLDERS:
        rows = ok_labels("data/labels", folder).to_pylist()
        graphs = joined_graphs("data/labels", rows)
        for row in rows:
            graph = graphs.get(tuple(row[k] for k in GRAPH_KEY))
            for route, moved in (("own", sixteen), ("moved", (*sixteen, "tf32", "fp32"))):
                routing.MOVED_FROM_AMP = moved
                got = (answer(row, graph) if graph is not None else None) or {}
                for target in TARGETS:
                    measured, value = row[target], got.get(target)
                    if measured and value:
                        out.append({"precision": row["precision"], "target": target, "route": route,
                                    "batch": row["batch_size"], "error": value / measured - 1,
                                    "covered": got[f"{target}_low"] <= measured <= got[f"{target}_high"]})
    routing.MOVED_FROM_AMP = shipped
    return pd.DataFrame(out)


def table(df: pd.DataFrame) -> pd.DataFrame:
    df = df.assign(abs=df.error.abs())
    return df.groupby(["precision", "target", "route"]).agg(
        rows=("abs", "size"), median=("abs", "median"), mean=("abs", "mean"),
        p90=("abs", lambda s: s.quantile(0.9)), bias=("error", "median"), covered=("covered", "mean")).round(3)


def held_ratios() -> list[float]:
    """Per (model, GPU, batch) of :data:`MODELS` x :data:`GPUS`, the training step TF32 moved from
    AMP over the fp32 answer where it read slower (1: it did not)."""
    found: list[float] = []

    def recording(row: dict, fp32: dict, asked: dict) -> list[str]:
        found[-1] = max(row["train_step_ms"] / fp32["train_step_ms"], 1.0)
        return held_at(row, fp32, asked)

    api.held_at = recording
    for model in MODELS:
        for gpu in GPUS:
            for batch in (8, 64, 256):
                found.append(1.0)
                trappm_ray.predict(model, batch, device=gpu, precision="tf32", optimizer="adamw")
    api.held_at = held_at
    return found


if __name__ == "__main__":
    rows = answers()
    print("every row\n", table(rows))
    print("batch >= 32\n", table(rows[rows.batch >= 32]))
    ratios = held_ratios()
    print(f"TF32 moved from AMP above fp32: {sum(r > 1 for r in ratios)} of {len(ratios)} answers, "
          f"up to {max(ratios):.2f}x")
