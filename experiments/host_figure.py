"""Which host time per kernel does the GPU campaign's PyTorch read, and what does the shipped
figure hide?

    .venv/bin/python experiments/host_figure.py          (about 2 minutes)

The step model issues each forward kernel at ``HOST_US`` (40 us forward + 130 us backward: the
RTX 3090's timm labels at batch 1, PyTorch 1.10-1.12). The campaign measured its sweeps from
batch 1 on PyTorch 2.11. Per model, its least measured time per kernel (training step and
inference pass over the kernels the step model counts, :func:`~trappm_ray.physics.step_model.launches`)
is an upper bound on that host's figure, as the RTX 3090's is on its own. This scores the physics
alone (no learned part) on the campaign's plain training and inference rows (no checkpointing,
accumulation or channels-last) with the shipped figure and with one fitted on the campaign: each
model answered with the median of the *other* models' least figures (leave one model out), split
by batch (at most 8: host-bound; at least 32: device-bound), and at batch >= 32 per precision.
"""
import argparse
import logging

import numpy as np
import pandas as pd

from trappm_ray import devices
from trappm_ray.evaluate.campaign import campaign_rows, row_setting, setting_name
from trappm_ray.physics.step_model import HOST_US, launches, step_time

BANDS = {"all": (1, 1 << 30), "batch <= 8": (1, 8), "batch >= 32": (32, 1 << 30)}


def plain_rows(labels: str) -> list[tuple]:
    """(row, graph, spec, kernels) of the campaign's rows with both times and a plain setting."""
    out = []
    for r, graph in campaign_rows(labels, lambda r: r.get("train_step_ms") and r.get("inference_ms")):
        if setting_name(r).count("/") == 2:  # no recompute / accumulation
            spec = devices.get(r["device_spec"])
            out.append((r, graph, spec, launches(graph, spec, r["precision"])))
    return out


def least_per_kernel(rows: list[tuple]) -> pd.DataFrame:
    """Per model, its least measured training-step and inference time per kernel (us)."""
    per = pd.DataFrame([(r["arch"], r["train_step_ms"] / n * 1e3, r["inference_ms"] / n * 1e3)
                        for r, _, _, n in rows if n > 0], columns=["model", "train_us", "infer_us"])
    return per.groupby("model").min()


def answers(rows: list[tuple], host_of) -> pd.DataFrame:
    """Answer / measured of every row, training and inference, ``host_of(model)`` its host figure."""
    out = []
    for r, graph, spec, _ in rows:
        host, setting = host_of(r["arch"]), row_setting(r)
        out.append((r["arch"], r["batch_size"], r["precision"], step_time(graph, spec, setting, "train", host).total_ms / r["train_step_ms"],
                    step_time(graph, spec, setting, "infer", host).total_ms / r["inference_ms"]))
    return pd.DataFrame(out, columns=["model", "batch", "precision", "train", "infer"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--labels", default="data/labels")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = plain_rows(args.labels)
    least = least_per_kernel(rows)
    print("| model | least training step / kernel (us) | least inference / kernel (us) |\n|---|---|---|")
    for model, f in least.iterrows():
        print(f"| {model} | {f.train_us:.0f} | {f.infer_us:.0f} |")

    def left_out(model: str) -> dict[str, float]:
        f = least.drop(model).median()
        return {"forward": float(f.infer_us), "backward": float(f.train_us - f.infer_us)}

    fitted = least.median()
    variants = {f"shipped ({HOST_US['forward']:.0f} + {HOST_US['backward']:.0f} us)": lambda m: HOST_US,
                f"campaign, model left out (about {fitted.infer_us:.0f} + {fitted.train_us - fitted.infer_us:.0f} us)": left_out}
    print(f"\n{len(rows)} rows\n\n| host figure | batches | rows | training MAPE | median answer / measured "
          "| inference MAPE | median answer / measured |\n|---|---|---|---|---|---|---|")
    device_bound = {}
    for name, host_of in variants.items():
        d = answers(rows, host_of)
        for band, (lo, hi) in BANDS.items():
            s = d[(d.batch >= lo) & (d.batch <= hi)]
            print(f"| {name} | {band} | {len(s)} | {np.mean(np.abs(s.train - 1)) * 100:.1f}% | {s.train.median():.2f} "
                  f"| {np.mean(np.abs(s.infer - 1)) * 100:.1f}% | {s.infer.median():.2f} |")
        device_bound[name] = d[d.batch >= BANDS["batch >= 32"][0]]
    # where the device side falls short once the host is right: per precision, batch >= 32
    print("\n| host figure | precision | rows | training: median answer / measured | inference |\n|---|---|---|---|---|")
    for name, d in device_bound.items():
        for precision, s in d.groupby("precision"):
            print(f"| {name} | {precision} | {len(s)} | {s.train.median():.2f} | {s.infer.median():.2f} |")
    print("\n| precision | model | rows | training, campaign's figure |\n|---|---|---|---|")
    for (precision, model), s in d.groupby(["precision", "model"]):  # the last variant: the campaign's
        print(f"| {precision} | {model} | {len(s)} | {s.train.median():.2f} |")
