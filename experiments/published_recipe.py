"""The published TraPPM regressor recipe on the RTX 3090 training-step labels, and why it fails.

    .venv/bin/python experiments/published_recipe.py [--epochs 100] [--seed 1337] [--max-train 0]
                                                    [--json PATH] [--plot PATH]

The recipe as the paper's public code trains it: trappm-v1 node features (unscaled), the six
static graph features z-scored within each graph's own vector, the raw target with MSE, GraphSAGE
512 / FC 512 with dropout on node embeddings, Adam 1e-3, batch size 1, every epoch run and the
epoch of lowest training loss kept. One difference: no pretrained trappm-v1 GAE embedding (none
is trained on the GPU graphs here); on the CPU labels a frozen random encoder scored like the
pretrained one (``docs/results.md``, ``random-encoder``).

Beside it, on the same held-out-architecture split (30% of each family's architectures, the
evaluation's ``arch`` split; 15% of the rest for validation), measured in the same run, each as
one Ray task:

* ``published+log``: the single change of ``scaling="log"`` (target z-scored in log space with a
  Huber loss, static features z-scored over the training graphs instead of within each graph);
* ``nnlqp-v1``: this project's supervised recipe (hidden 64, FC 128, batch 32, lr 2e-3, epoch
  chosen on validation) on the same v1 features;
* ``nnlqp-v2``: the same on v2 features (log-scaled counts, a wider operator vocabulary).

Rows: the RTX 3090 training-step labels of one setting (channels-first, PyTorch 1.x eager: the
most common), one per graph, like the paper's dataset. Prints the inputs' scales (the evidence:
node feature columns spanning many orders of magnitude, the target's range), every variant's test
MAPE, its training-loss and validation-MAPE curves every 10 epochs; ``--plot`` draws the curves.
"""
from __future__ import annotations

import argparse
import collections
import json
import time
from dataclasses import replace

import numpy as np
import torch

from trappm_ray.graph import features
from trappm_ray.graph.data import graph_data
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.model.device_features import SETTING_COLS
from trappm_ray.ray_init import ensure_ray
from trappm_ray.train.gpu_examples import examples, graph_index
from trappm_ray.train.regressors import RECIPES, fit, mape, predict_rows, prepare
from trappm_ray.train.splits import split

PUBLISHED = replace(RECIPES["trappm-published"], embedding="none", hidden=512, fc=512, batch_size=1,
                    select="train_loss")


def variants(epochs: int) -> dict:
    """The recipes compared, by name, with the feature set each reads."""
    project = replace(RECIPES["nnlqp"], feature_set="trappm-v1", batch_affine=False, max_epochs=epochs,
                      patience=epochs)
    return {"published": replace(PUBLISHED, max_epochs=epochs),
            "published+log": replace(PUBLISHED, max_epochs=epochs, scaling="log"),
            "nnlqp-v1": project,
            "nnlqp-v2": replace(project, feature_set="v2")}


def rows_of_one_setting(labels: str) -> tuple[list[dict], dict]:
    """RTX 3090 training-step examples of the most common setting, one per graph."""
    index = graph_index(labels, ())
    ex = [e for e in examples(labels, (), ("rtx3090-amp",), index)[0] if e["target"] == "train_step_ms"]
    common = collections.Counter(e["setting"] for e in ex).most_common(1)[0][0]
    one, seen = [], set()
    for e in ex:
        if e["setting"] == common and e["rkey"][:3] not in seen:
            seen.add(e["rkey"][:3])
            one.append(e)
    return one, {"setting": dict(zip(SETTING_COLS, common)), "index": index}


def input_scales(data: list, y: np.ndarray, feature_set: str) -> dict:
    """Per-column spread of the node features, the static features' range and the target's."""
    x = torch.cat([d.x for d in data]).numpy()
    col_max = np.abs(x).max(0)
    fs = features.get(feature_set)
    names = (list(fs.ops) + [f"in_shape[{i}]" for i in range(6)] + [f"out_shape[{i}]" for i in range(6)]
             + ["macs", "params", "memory"]) if feature_set == "trappm-v1" else None
    top = np.argsort(col_max)[::-1][:5]
    static = torch.cat([d.static for d in data]).numpy()
    return {"node_columns": int(x.shape[1]),
            "node_max_abs_top5": [(names[i] if names else int(i), float(col_max[i])) for i in top],
            "node_columns_above_1e3": int((col_max > 1e3).sum()),
            "static_min": static.min(0).tolist(), "static_max": static.max(0).tolist(),
            "target_ms": [float(y.min()), float(np.median(y)), float(y.max())]}


def run_variant(data, y, train, val, test, recipe, seed: int) -> dict:
    """Body of one Ray task: fit on ``train`` (``val`` for selection), score ``test``."""
    torch.set_num_threads(1)
    out = fit(data, y, None, train, val, recipe, seed)
    pred = predict_rows(out["model"], out["scaler"], data, None, test)
    return {"test_mape": mape(pred, y[test]), "best_epoch": out["best_epoch"], "epochs": out["epochs"],
            "seconds": out["seconds"], "history": out["history"],
            "pred_spread": [float(pred.min()), float(pred.max())]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", default="data/labels")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--max-train", type=int, default=0, help="cap on training graphs (0: all)")
    ap.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    ex, info = rows_of_one_setting(args.labels)
    train, val, test = split(ex, "arch", args.seed)
    if args.max_train:
        train = np.random.default_rng(args.seed).permutation(train)[:args.max_train]
    y = np.array([e["measured"] for e in ex])
    print(f"{len(ex)} graphs (setting {info['setting']}); train {len(train)}, val {len(val)}, test {len(test)}")
    chosen = {k: v for k, v in variants(args.epochs).items() if not args.only or k in args.only.split(",")}
    import ray

    ensure_ray()
    refs, scales = {}, {}
    for fs in {r.feature_set for r in chosen.values()}:
        data = [graph_data(row_to_graph(info["index"][tuple(e["rkey"][:3])]), fs) for e in ex]
        scales[fs] = input_scales(data, y, fs)
        # node dropout needs every node; the other recipes train on node classes, in far less memory
        for nodes in {r.node_dropout for r in chosen.values() if r.feature_set == fs}:
            refs[(fs, nodes)] = ray.put(prepare(data, classes=not nodes, keep_nodes=nodes))
        del data
    del info["index"]
    for fs, s in scales.items():
        print(f"inputs {fs}: {json.dumps(s)}")
    task = ray.remote(num_cpus=1)(run_variant)
    t0 = time.perf_counter()
    futures = {name: task.remote(refs[(r.feature_set, r.node_dropout)], y, train, val, test, r, args.seed)
               for name, r in chosen.items()}
    results = {name: ray.get(f) for name, f in futures.items()}
    print(f"\n{'variant':14} {'test MAPE %':>11} {'kept epoch':>10} {'epochs':>6} {'fit s':>6}  test predictions (ms)")
    for name, r in results.items():
        print(f"{name:14} {r['test_mape']:11.1f} {r['best_epoch']:10d} {r['epochs']:6d} {r['seconds']:6.0f}  "
              f"{r['pred_spread'][0]:.3g}..{r['pred_spread'][1]:.3g}")
    base = results.get("published")
    if base:
        for name, r in results.items():
            print(f"{name:14} test MAPE / published: {r['test_mape'] / base['test_mape']:.3f}")
    for name, r in results.items():
        curve = [(i + 1, f"{loss:.4g}", f"{v:.1f}") for i, (loss, v) in enumerate(r["history"]) if i % 10 == 0]
        print(f"{name} (epoch, training loss, validation MAPE %): {curve}")
    print(f"wall {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"setting": info["setting"], "scales": scales, "results": results,
                       "sizes": [len(train), len(val), len(test)]}, fh, indent=1)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for name, r in results.items():
            loss, val_mape = (np.array(v, dtype=float) for v in zip(*r["history"]))
            finite = lambda v: np.where(np.isfinite(v), v, np.nan)  # noqa: E731 (diverged epochs)
            axes[0].plot(finite(loss / loss[0]), label=name)
            axes[1].plot(finite(val_mape), label=name)
        axes[0].set(yscale="log", xlabel="epoch", ylabel="training loss / first epoch's")
        axes[1].set(yscale="log", xlabel="epoch", ylabel="validation MAPE %")
        axes[1].legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
