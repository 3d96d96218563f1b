"""Transfer learning: adapt one device's predictor to another device with few of its labels.

Each seed's regressor starts from the source device's weights and scaling and is fine-tuned on
labeled examples of the target device (the paper's Table V: A100 -> V100 with 543 labels).
Before fine-tuning, the target's log-scale offset is re-centred on the new device's training
rows, so that a device that is uniformly k times slower starts out right on average.
:func:`finetune_table` measures the gain on held-out rows; :func:`finetune_predictor` adapts a
predictor with all of a new device's labels and registers the result.
"""
from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import torch

from trappm_ray.model import predictor as P
from trappm_ray.labels.examples import load_examples
from trappm_ray.model.manifest import NETWORK, Manifest, Network
from trappm_ray.model.predictor import Predictor, Scaler
from trappm_ray.train.regressors import (Recipe, predict_rows, embed, fit, mape, prepare, train_epochs,
                      unpack_graphs)
from trappm_ray.targets import unit
from trappm_ray.train.fanout import fan_out, share_graphs
from trappm_ray.train.splits import split

log = logging.getLogger(__name__)


def recentred(head, sc: Scaler, data, emb, y: np.ndarray, idx) -> Scaler:
    """A copy of ``sc`` whose log-target offset moves the head's mean log error on ``idx`` to 0."""
    shift = float(np.mean(np.log(y[idx]) - np.log(predict_rows(head, sc, data, emb, idx))))
    return Scaler(sc.static_mean, sc.static_std, sc.emb_mean, sc.emb_std, sc.y_mean + shift, sc.y_std)


def fine_tune_head(head, sc: Scaler, data, emb, y: np.ndarray, train_idx, val_idx,
                   epochs: int = 40, lr: float = 5e-4, patience: int = 10, seed: int = 0) -> dict:
    """Fine-tune a copy of one seed's head on the new device's ``train_idx`` rows.

    Returns:
        ``head`` (state of the best validation epoch, the re-centred start counting as epoch 0),
        its ``scaler``, ``val_mape``, the source's ``val_mape_before`` (as is) and ``best_epoch``.
    """
    torch.manual_seed(seed)
    head = copy.deepcopy(head)
    before = mape(predict_rows(head, sc, data, emb, val_idx), y[val_idx])
    sc = recentred(head, sc, data, emb, y, train_idx)
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    start = (mape(predict_rows(head, sc, data, emb, val_idx), y[val_idx]), 0,
             copy.deepcopy(head.state_dict()))
    best, _ = train_epochs(head, sc, data, emb, y, train_idx, val_idx, opt,
                           torch.nn.functional.huber_loss, 16, epochs, patience,
                           np.random.default_rng(seed), best=start)
    return {"head": head, "scaler": sc, "val_mape": best[0], "val_mape_before": before,
            "best_epoch": best[1]}


def fine_tune(pred: Predictor, target: str, data, emb, y: np.ndarray, train_idx, val_idx,
              epochs: int = 40, lr: float = 5e-4, patience: int = 10) -> tuple[list, list]:
    """Fine-tuned copies of ``pred``'s heads for ``target`` and their scalers, one per seed."""
    tuned = [fine_tune_head(h, sc, data, emb, y, train_idx, val_idx, epochs, lr, patience, k)
             for k, (h, sc) in enumerate(zip(pred.heads[target], pred.scalers[target]))]
    return [t["head"] for t in tuned], [t["scaler"] for t in tuned]


def _ensemble(heads, scalers, data, emb, idx) -> np.ndarray:
    return np.mean([predict_rows(h, sc, data, emb, idx) for h, sc in zip(heads, scalers)], 0)


def finetune_table(pred: Predictor, labels_dir: str, slug: str, sizes=(25, 50, 100),
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
    recipe = scratch or Recipe(**{k: v for k, v in pred.manifest.recipe.items()
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
            heads, scalers = fine_tune(pred, target, data, emb, y, tr, va)
            res["fine_tuned"][n] = mape(_ensemble(heads, scalers, data, emb, test), y[test])
            fitted = fit(data, y, emb, tr, va, recipe, seed)
            res["scratch"][n] = mape(predict_rows(fitted["model"], fitted["scaler"], data, emb, test), y[test])
        out[target] = res
    return out


def finetune_markdown(table: dict, source: str, target: str) -> list[str]:
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


@dataclass
class FinetuneConfig:
    """Adapt a trained predictor to a new device with that device's labels, and register it.

    Args:
        labels: the label directory holding the new device's labels (local or ``s3://``).
        device: the new device's slug under ``labels``.
        source: the predictor to adapt (a registry URI; empty = the shipped default).
        epochs, lr, patience: fine-tuning schedule of each seed's head.
        registry, name: register as ``<registry>/<name>/vNNNN`` (name empty = the device slug).
        ray_address: an existing cluster; None = ``RAY_ADDRESS`` or a private local one.
    """

    labels: str = "data/labels"
    device: str = ""
    source: str = ""
    epochs: int = 40
    lr: float = 5e-4
    patience: int = 10
    registry: str = "artifacts/predictors"
    name: str = ""
    ray_address: str | None = None


def _fine_tune_task(head, sc, data, emb, y, train_idx, val_idx, epochs, lr, patience, seed):
    torch.set_num_threads(1)  # Ray runs one task per CPU
    out = fine_tune_head(head, sc, unpack_graphs(data), emb, y, train_idx, val_idx, epochs, lr,
                         patience, seed)
    return {**out, "head": out["head"].state_dict()}


def finetune_predictor(cfg: FinetuneConfig) -> dict:
    """Fine-tune every (target, seed) head of ``cfg.source`` on the new device as Ray tasks.

    Each seed holds out its own 15% per family of the new device's rows to choose the epoch.
    Only targets both the source predicts and the new device has labels for are adapted (a
    target the source lacks needs ``jobs/train_regressors.py`` on the new labels).

    Returns:
        ``uri`` of the registered predictor, per-target validation MAPE before (source as is) and
        after fine-tuning (means over seeds), the targets left out, and the wall time.
    """
    from trappm_ray.ray_init import ensure_ray
    from trappm_ray.train.build_predictor import available_targets, label_provenance

    if not cfg.device:
        raise ValueError("--device: the new device's slug under --labels is required")
    t0 = time.perf_counter()
    ensure_ray(cfg.ray_address)
    source = Predictor.load(cfg.source) if cfg.source else P.load_default()
    have = available_targets(cfg.labels, cfg.device)
    targets = [t for t in source.targets if t in have]
    if not targets:
        raise ValueError(f"{cfg.device} has labels for none of the source's targets "
                         f"{list(source.targets)}")
    ex = load_examples(cfg.labels, cfg.device, source.feature_set, tuple(targets))
    data = prepare(ex.data)
    data_ref, emb_ref = share_graphs(data, source.encoder)
    calls = {}
    for target in targets:
        y = ex.column(target)
        ok = np.flatnonzero(np.isfinite(y) & (y > 0))
        for k, (head, sc) in enumerate(zip(source.heads[target], source.scalers[target])):
            seed = source.manifest.net.seeds[k]
            tr, va, _ = split([ex.rows[i] for i in ok], "none", seed)
            calls[(target, k)] = (_fine_tune_task, (head, sc, data_ref, emb_ref, y, ok[tr], ok[va],
                                                    cfg.epochs, cfg.lr, cfg.patience, seed), {})
    results = fan_out(calls, f"fine-tuning on {cfg.device}")
    heads, scalers, before, after = {}, {}, {}, {}
    for target in targets:
        outs = [results[(target, k)] for k in range(len(source.heads[target]))]
        heads[target] = []
        for head, out in zip(source.heads[target], outs):
            head = copy.deepcopy(head)
            head.load_state_dict(out["head"])
            heads[target].append(head)
        scalers[target] = [o["scaler"] for o in outs]
        before[target] = float(np.mean([o["val_mape_before"] for o in outs]))
        after[target] = float(np.mean([o["val_mape"] for o in outs]))
        log.info("%s: val MAPE %.1f%% as is -> %.1f%% fine-tuned (best epochs %s)", target,
                 before[target], after[target], [o["best_epoch"] for o in outs])
    m, prov = source.manifest, label_provenance(cfg.labels, cfg.device, ex)
    net = m.net
    manifest = Manifest(
        name=cfg.name or cfg.device, kind=NETWORK, feature_set=m.feature_set, targets=tuple(targets),
        units={t: unit(t) for t in targets}, recipe=m.recipe,
        network=Network(seeds=net.seeds, head=net.head, encoder=net.encoder),
        device=prov.device, options=prov.options, data=prov.data, envelope_top=prov.envelope_top,
        metrics={"val_mape_mean_over_seeds": after, "val_mape_source_as_is": before},
        transfer={"source": cfg.source or "default", "source_device": m.device.slug,
                  "source_version": m.version, "epochs": cfg.epochs, "lr": cfg.lr},
        code_version=P.code_version(), torch=torch.__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    uri = P.register(Predictor(manifest, source.encoder, heads, scalers), cfg.registry,
                     cfg.name or cfg.device)
    return {"uri": uri, "device": cfg.device, "source": manifest.transfer, "examples": len(ex),
            "val_mape_source_as_is": before, "val_mape": after,
            "targets_left_out": [t for t in have if t not in targets],
            "wall_s": round(time.perf_counter() - t0, 1)}


__all__ = ["recentred", "fine_tune_head", "fine_tune", "finetune_table", "finetune_markdown",
           "FinetuneConfig", "finetune_predictor"]
