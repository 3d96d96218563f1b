"""Train the shipped kind of predictor: every target x seed as a parallel Ray task, registered.

Every labeled example of one device is used: 85% to fit, 15% (per family, by seed) to choose
the epoch. Accuracy on held-out data is measured by :mod:`trappm_ray.evaluate.run`, not here.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trappm_ray.model.anchors import ANCHOR_FILE
from trappm_ray.model.launch import envelope_top
from trappm_ray.model import predictor as P
from trappm_ray.model import stored
from trappm_ray.model.domain import fit_domain
from trappm_ray.model.manifest import NETWORK, Device, Manifest, Network
from trappm_ray.model.options import label_options
from trappm_ray import storage
from trappm_ray.graph import features
from trappm_ray.graph.rows import GRAPHS_FILE
from trappm_ray.model.networks import GraphEncoder, Regressor
from trappm_ray.labels.examples import join_graphs, load_examples
from trappm_ray.labels.store import default_slug, ok_labels
from trappm_ray.targets import TARGETS, label_column, unit
from trappm_ray.train.fanout import fan_out, share_graphs
from trappm_ray.train.pretrain import load_encoder
from trappm_ray.train.regressors import SEEDS, build_regressor, fit_task, for_target, prepare, recipe_with
from trappm_ray.train.splits import split

log = logging.getLogger(__name__)

DEFAULT_ENCODER = "artifacts/pretrain/gae-v2-cpu/encoder.pt"


@dataclass
class RegressConfig:
    """What to train the predictor on and where to register it.

    Args:
        labels: the label directory (``data/labels``; local or ``s3://``).
        device: device slug under ``labels``; empty = the one with the most labels.
        encoder: pretrained encoder (``encoder.pt`` of ``jobs/pretrain_gae.py``).
        targets: targets to train; empty = every target the device has labels for.
        seeds: one regressor per seed and target.
        recipe: a name in ``regress.RECIPES`` (must use pretrained or no embedding).
        max_epochs: override the recipe's epoch cap (0 = keep).
        registry, name: register as ``<registry>/<name>/vNNNN`` (name empty = the device slug).
        ship: also copy the registered predictor into the package as the default.
        join_corpus: first rebuild ``<labels>/graphs.parquet`` from this corpus.
        ray_address: an existing cluster; None = ``RAY_ADDRESS`` or a private local one.
        select: ``column=value`` filters on the label rows (e.g. ``memory_format=nchw``), for a
            device whose labels vary a setting; the manifest's options follow the selection.
        skip_unjoined: train on the rows that have a graph, leaving the others out (logged).
    """

    labels: str = "data/labels"
    device: str = ""
    encoder: str = DEFAULT_ENCODER
    targets: tuple[str, ...] = ()
    seeds: tuple[int, ...] = SEEDS
    recipe: str = "trappm-ray"
    max_epochs: int = 0
    registry: str = "artifacts/predictors"
    name: str = ""
    ship: bool = False
    join_corpus: str = ""
    ray_address: str | None = None
    select: tuple[str, ...] = ()
    skip_unjoined: bool = False

    def selection(self) -> dict:
        """``select`` as ``{column: value}`` (numbers as ints)."""
        pairs = (item.split("=", 1) for item in self.select)
        return {k: int(v) if v.isdigit() else v for k, v in pairs}


def data_hash(labels: str, slug: str) -> str:
    """sha256 of the device's compact labels file and the joined graphs (first 16 hex)."""
    h = hashlib.sha256()
    for uri in (storage.join(labels, slug, "labels.parquet"), storage.join(labels, GRAPHS_FILE)):
        h.update(storage.read_bytes(uri))
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Provenance:
    """The manifest fields that say what a predictor's labels are (:func:`label_provenance`)."""

    device: Device
    options: dict[str, list]
    data: dict[str, Any]
    envelope_top: int


def label_device(rows: list[dict], slug: str, spec: str | None = None) -> Device:
    """The manifest's device for label ``rows`` of ``slug`` (``spec``: its row of the spec
    table, else the one the rows name; imported sets name theirs)."""
    versions = sorted({v for r in rows for v in (r.get("torch_version") or "").split(";") if v})
    kind = rows[0]["device"]
    return Device(slug=slug, name=rows[0]["device_name"], kind=kind, threads=rows[0].get("threads") if kind == "cpu" else None,
                  torch=";".join(versions) or None, spec=spec or rows[0].get("device_spec") or None)


def label_provenance(labels: str, slug: str, examples, select: dict | None = None) -> Provenance:
    """The manifest's ``device``, ``options``, ``data`` and ``envelope_top`` for a predictor
    fitted on ``examples`` (the ok rows of ``slug`` that match ``select``)."""
    rows = [r for r in ok_labels(labels, slug).to_pylist()
            if all(r.get(k) == v for k, v in (select or {}).items())]
    dates = sorted(r["date"] for r in rows if r["date"])
    device = label_device(rows, slug)
    return Provenance(device, label_options(rows),
                      {"labels": len(examples), "architectures": len({r["arch"] for r in examples.rows}),
                       "families": sorted({r["family"] for r in examples.rows}),
                       "sha256_16": data_hash(labels, slug),
                       "label_dates": [dates[0], dates[-1]] if dates else None},
                      envelope_top([int(r["batch_size"]) for r in rows], device.kind))


def available_targets(labels: str, slug: str) -> tuple[str, ...]:
    """The targets whose label column holds at least one number on this device."""
    t = ok_labels(labels, slug)
    device = t.column("device")[0].as_py() if t.num_rows else None
    columns = {name: label_column(name, device) for name in TARGETS}
    return tuple(name for name, col in columns.items()
                 if col in t.column_names and t.column(col).null_count < t.num_rows
                 and not np.isnan(np.asarray(t.column(col).to_pylist(), dtype=float)).all())


def train_predictor(cfg: RegressConfig) -> dict:
    """Fit targets x seeds regressors with Ray and register them as one predictor.

    Returns:
        ``uri`` of the registered predictor, per-target validation MAPE (mean over seeds),
        per-task seconds and the wall time.
    """
    from trappm_ray.ray_init import ensure_ray

    t0 = time.perf_counter()
    ensure_ray(cfg.ray_address)
    if cfg.join_corpus:
        log.info("joined graphs: %s", join_graphs(cfg.labels, cfg.join_corpus))
    slug = cfg.device or default_slug(cfg.labels)
    targets = cfg.targets or available_targets(cfg.labels, slug)
    recipe = recipe_with(cfg.recipe, max_epochs=cfg.max_epochs or None)
    if recipe.embedding == "random" or recipe.scaling != "log":
        raise ValueError(f"recipe {cfg.recipe!r} is for evaluation only")
    examples = load_examples(cfg.labels, slug, recipe.feature_set, targets, cfg.selection(),
                             cfg.skip_unjoined)
    data = prepare(examples.data)
    encoder, enc_meta = (load_encoder(cfg.encoder) if recipe.embedding == "pretrained"
                         else (None, None))
    if encoder is not None and enc_meta["feature_set"] != recipe.feature_set:
        raise ValueError(f"encoder {cfg.encoder} uses {enc_meta['feature_set']} features, "
                         f"recipe {cfg.recipe} {recipe.feature_set}")
    data_ref, emb_ref = share_graphs(data, encoder)
    domain = fit_domain(np.concatenate([d.static.numpy() for d in examples.data]),
                        [r["family"] for r in examples.rows])
    example = examples.data[0]
    examples.data = []  # the graphs live in the object store from here on, shared by the tasks
    del data
    calls = {}
    for target in targets:
        y = examples.column(target)
        ok = np.flatnonzero(np.isfinite(y) & (y > 0))
        for seed in cfg.seeds:
            tr, va, _ = split([examples.rows[i] for i in ok], "none", seed)
            calls[(target, seed)] = (fit_task, (data_ref, y, emb_ref, ok[tr], ok[va], np.empty(0, np.int64),
                                                for_target(recipe, target), seed), {"keep_model": True})
    results = fan_out(calls, f"fitting {slug} regressors")
    for (target, seed), r in results.items():
        log.info("%s seed %s: val MAPE %.2f%% at epoch %s/%s (%.0f s)", target, seed, r["val_mape"],
                 r["best_epoch"], r["epochs"], r["seconds"])
    emb_dim = 0 if encoder is None else encoder.out_dim
    heads, scalers = {}, {}
    for target in targets:
        heads[target] = []
        for seed in cfg.seeds:
            head = build_regressor(example, emb_dim, for_target(recipe, target))
            head.load_state_dict(results[(target, seed)]["state"])
            heads[target].append(head)
        scalers[target] = [results[(target, seed)]["scaler"] for seed in cfg.seeds]
    val = {t: float(np.mean([results[(t, s)]["val_mape"] for s in cfg.seeds])) for t in targets}
    prov = label_provenance(cfg.labels, slug, examples, cfg.selection())
    manifest = Manifest(
        name=cfg.name or slug, kind=NETWORK, feature_set=recipe.feature_set, targets=tuple(targets),
        device=prov.device, options=prov.options, data=prov.data, units={t: unit(t) for t in targets},
        envelope_top=prov.envelope_top,
        network=Network(
            seeds=tuple(cfg.seeds),
            head={"hidden": recipe.hidden, "fc": recipe.fc, "dropout": recipe.dropout, "node_dropout": recipe.node_dropout,
                  "batch_affine": [t for t in targets if for_target(recipe, t).batch_affine]},
            encoder=None if encoder is None else {
                "in_dim": encoder.in_dim, "dims": list(encoder.dims), "dropout": encoder.dropout,
                "pretrained": {k: enc_meta.get(k) for k in ("epoch", "loss", "corpus", "max_graphs")}}),
        recipe={"name": cfg.recipe, **asdict(recipe)}, domain=domain,
        metrics={"val_mape_mean_over_seeds": val},
        code_version=P.code_version(), torch=torch.__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    uri = P.register(P.Predictor(manifest, encoder, heads, scalers), cfg.registry, cfg.name or slug)
    if cfg.ship:
        ship(uri)
    return {"uri": uri, "device": slug, "targets": list(targets), "examples": len(examples),
            "val_mape": val, "task_seconds": {f"{t}/{s}": round(r["seconds"], 1)
                                              for (t, s), r in results.items()},
            "wall_s": round(time.perf_counter() - t0, 1)}


def ship(uri: str, dest: Path = P.DEFAULT_DIR) -> str:
    """Copy a registered predictor into the package (``dest``: the default predictor's
    directory, or ``trappm_ray/predictors/<name>/`` of a per-device one); returns ``dest``."""
    P.Predictor.load(uri)  # validate before replacing the shipped one
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in (stored.MANIFEST, stored.WEIGHTS, ANCHOR_FILE):
        if name != ANCHOR_FILE or storage.exists(storage.join(uri, name)):  # measurements: GPU predictors only
            (dest / name).write_bytes(storage.read_bytes(storage.join(uri, name)))
    return str(dest)


def random_predictor(targets=("train_step_ms", "train_memory_mb", "inference_ms"), seeds=(1, 2),
                     feature_set: str = "v2", encoder_dims=(16, 8), hidden: int = 8, fc: int = 8,
                     seed: int = 0, batch_affine=("train_memory_mb",)) -> P.Predictor:
    """An untrained predictor of the given shapes: heads with plausible scaling (outputs of the
    order of 100 units), for timing the prediction path and for tests that need no training."""
    torch.manual_seed(seed)
    fs = features.get(feature_set)
    encoder = GraphEncoder(fs.node_dim, encoder_dims, 0.0) if encoder_dims else None
    emb = encoder.out_dim if encoder is not None else 0
    heads = {t: [Regressor(fs.node_dim, fs.static_dim, emb, hidden, fc, 0.0, node_dropout=False,
                           batch_affine=t in batch_affine) for _ in seeds] for t in targets}
    for t in batch_affine:
        for head in heads.get(t, ()):
            head.set_target_scale(0.1, 1.0)
    scalers = {t: [P.Scaler(torch.zeros(fs.static_dim), torch.ones(fs.static_dim), torch.zeros(emb),
                          torch.ones(emb), 4.6, 0.1) for _ in seeds] for t in targets}
    manifest = Manifest(
        name="random", kind=NETWORK, feature_set=fs.name, targets=tuple(targets),
        device=Device(slug="test-device", name="test"),
        network=Network(seeds=tuple(seeds), head={"hidden": hidden, "fc": fc, "dropout": 0.0, "node_dropout": False,
                                                   "batch_affine": list(batch_affine)},
                        encoder=({"in_dim": fs.node_dim, "dims": list(encoder_dims), "dropout": 0.0}
                                 if encoder is not None else None)))
    return P.Predictor(manifest, encoder, heads, scalers)


__all__ = ["RegressConfig", "DEFAULT_ENCODER", "train_predictor", "available_targets", "ship",
           "data_hash", "label_device", "label_provenance"]
