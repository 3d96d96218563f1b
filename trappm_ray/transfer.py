"""Transfer learning: adapt one device's predictor to another device with few of its labels.

Each seed's regressor starts from the source device's weights and scaling and is fine-tuned on
``n`` labeled examples of the target device (the paper's Table V: A100 -> V100 with 543 labels).
The table compares, on the same held-out target-device rows, the source predictor used as is,
the fine-tuned one, and a regressor trained from scratch on the same ``n`` examples.
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from .labeled import load_examples
from .predictor import Predictor
from .regress import Recipe, _predict, embed, fit, mape, prepare, train_epochs
from .splits import split


def fine_tune(pred: Predictor, target: str, data, emb, y: np.ndarray, train_idx, val_idx,
              epochs: int = 40, lr: float = 5e-4, patience: int = 10) -> list:
    """Fine-tuned copies of ``pred``'s heads for ``target`` (best validation epoch of each)."""
    heads = []
    for k, (head, sc) in enumerate(zip(pred.heads[target], pred.scalers[target])):
        head = copy.deepcopy(head)
        opt = torch.optim.Adam(head.parameters(), lr=lr)
        start = (mape(_predict(head, sc, data, emb, val_idx), y[val_idx]), 0,
                 copy.deepcopy(head.state_dict()))
        train_epochs(head, sc, data, emb, y, train_idx, val_idx, opt,
                     torch.nn.functional.huber_loss, 16, epochs, patience,
                     np.random.default_rng(k), best=start)
        heads.append(head)
    return heads


def _ensemble(heads, scalers, data, emb, idx) -> np.ndarray:
    return np.mean([_predict(h, sc, data, emb, idx) for h, sc in zip(heads, scalers)], 0)


def transfer_table(pred: Predictor, labels_dir: str, slug: str, sizes=(25, 50, 100),
                   seed: int = 1337, scratch: Recipe | None = None) -> dict:
    """MAPE on target-device test rows (30% per family): as is, fine-tuned, and from scratch.

    Args:
        pred: the source device's predictor (v2 features).
        labels_dir, slug: the target device's labels.
        sizes: numbers of target-device labels to adapt with (drawn from the training side).
        seed: seed of the split and of the draws.
        scratch: recipe of the from-scratch reference (default: pred's recipe, 40 epochs).

    Returns:
        ``{target: {"no_transfer": mape, "fine_tuned": {n: mape}, "scratch": {n: mape}}}`` and
        ``"test_rows"``.
    """
    targets = [t for t in pred.targets]
    ex = load_examples(labels_dir, slug, pred.feature_set, tuple(targets))
    data = prepare(ex.data)
    emb = embed(pred.encoder, data)
    train, val, test = split(ex.rows, "random", seed)
    pool = np.concatenate([train, val])
    rng = np.random.default_rng(seed)
    order = rng.permutation(pool)
    recipe = scratch or Recipe(**{k: v for k, v in pred.manifest.get("recipe", {}).items()
                                  if k in Recipe.__dataclass_fields__} | {"max_epochs": 40})
    out: dict = {"test_rows": int(len(test))}
    for target in targets:
        y = ex.column(target)
        if not np.isfinite(y[test]).all():
            continue
        res = {"no_transfer": mape(_ensemble(pred.heads[target], pred.scalers[target], data, emb, test), y[test]),
               "fine_tuned": {}, "scratch": {}}
        for n in sizes:
            if n > len(order):
                continue
            few = order[:n]
            cut = max(1, n // 5)  # a fifth of the few labels choose the epoch
            tr, va = few[cut:], few[:cut]
            heads = fine_tune(pred, target, data, emb, y, tr, va)
            res["fine_tuned"][n] = mape(_ensemble(heads, pred.scalers[target], data, emb, test), y[test])
            fitted = fit(data, y, emb, tr, va, recipe, seed)
            res["scratch"][n] = mape(_predict(fitted["model"], fitted["scaler"], data, emb, test), y[test])
        out[target] = res
    return out


def transfer_markdown(table: dict, source: str, target: str) -> list[str]:
    sizes = sorted({n for t, r in table.items() if t != "test_rows" for n in r["fine_tuned"]})
    lines = [f"Source `{source}` -> target `{target}`; MAPE % on {table['test_rows']} target-device "
             "test rows (30% per family); n = target-device labels used.", "",
             "| target | no transfer | " + " | ".join(f"fine-tuned n={n} | scratch n={n}" for n in sizes) + " |",
             "|---" * (2 + 2 * len(sizes)) + "|"]
    for t, r in table.items():
        if t == "test_rows":
            continue
        cells = [f"{r['fine_tuned'].get(n, float('nan')):.1f} | {r['scratch'].get(n, float('nan')):.1f}"
                 for n in sizes]
        lines.append(f"| {t} | {r['no_transfer']:.1f} | " + " | ".join(cells) + " |")
    return lines


__all__ = ["fine_tune", "transfer_table", "transfer_markdown"]
