"""Train a shipped GPU predictor: the physics-informed GNN on one device's measured labels.

The network is the supervised GraphSAGE regressor (the ``nnlqp`` recipe of
:mod:`trappm_ray.train.regressors`) fed :mod:`trappm_ray.model.roofline_inputs`: v2 node
features + per-node roofline terms, the device-aware static vector and the frozen pretrained
encoder's embedding of the graph (TraPPM's semi-supervised input: with families held out it took
the RTX 3090's training step from 12.3 to 11.4% MAPE, and from 13.3 to 12.5% at a second seed,
``docs/training.md``), target log(measured / floor). On the GPU evaluation's held-out
architectures and families it beats the recipe of the CPU predictor by 5-11 MAPE points
(``docs/results-gpu.md``, ``gnn`` vs ``encoder-recipe``).

Beside the networks it stores the device's measurements by graph fingerprint
(:mod:`trappm_ray.model.anchors`), which reference transfer moves for a graph they hold.

Beside each network sits a static MLP (:mod:`trappm_ray.model.static_mlp`) fitted on the same
target's rows; the predictor answers with their geometric blend, the GNN's share
:data:`~trappm_ray.model.static_mlp.GNN_SHARE` (the GPU evaluation's ``gnn`` row uses the same
share: ``docs/results-gpu.md``, ``gnn`` vs ``gnn-alone``, ``gnn-val-share`` and ``mlp``).

Every target x seed network is one Ray task. Each seed holds out 15% of the architectures (per
family) to stop on; their residuals, pooled over seeds, make the split-conformal interval, so it
describes the error on an architecture the predictor never saw.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone

import numpy as np
import torch

from trappm_ray import devices
from trappm_ray.graph.features import V2_STATIC
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.model import launch
from trappm_ray.model.launch import envelope_top
from trappm_ray.model import predictor as P
from trappm_ray.model.anchors import from_examples
from trappm_ray.model.domain import fit_domain
from trappm_ray.model.intervals import LEVELS, weighted_quantiles
from trappm_ray.model.manifest import NETWORK, Manifest, Network
from trappm_ray.model.options import label_options
from trappm_ray.model.device_features import SETTING_COLS
from trappm_ray.graph.data import graph_data, to_data, with_static
from trappm_ray.model.roofline_inputs import INPUTS, STATIC_DIM, node_arrays
from trappm_ray.model.stored import read_manifest, rewrite_manifest
from trappm_ray.model.static_mlp import GNN_SHARE, blend, blend_weight, fit_static_mlp
from trappm_ray.labels.store import ok_labels
from trappm_ray.targets import unit
from trappm_ray.train.build_predictor import data_hash, label_device, ship
from trappm_ray.train.correction_fit import correction_bounds
from trappm_ray.train.fanout import fan_out, share_graphs
from trappm_ray.train.gpu_examples import examples, graph_index
from trappm_ray.train.layout_fit import fit_layout, layout_rows, run_key
from trappm_ray.train.regressors import RECIPES, build_regressor, embed, fit_task, prepare
from trappm_ray.train.splits import split

log = logging.getLogger(__name__)


@dataclass
class GpuPredictorConfig:
    """What the GPU predictor is trained on and where it goes.

    Args:
        labels: label directory (``<labels>/<device>/labels.parquet`` and ``graphs.parquet``).
        corpora: graph corpora joining label rows absent from ``graphs.parquet``.
        device: the label device folder (a GPU with a row in the spec table).
        targets: targets to fit (those with labels). seeds: one network per seed and target.
        max_epochs: epoch cap (training stops 10 epochs after its best held-out epoch).
        auxiliary_targets: targets whose networks also train on the device's rows of its other
            targets (:func:`auxiliary_rows`; the input says which target a row is): RTX 3090
            training steps learn from its inference rows too, of ~400 architectures more.
        gnn_share: the GNN's share of its blend with a static MLP (1.0: the networks alone, no
            MLP; None: the share with the least error on the held-out architectures).
        registry, name: register as ``<registry>/<name>/vNNNN`` (name empty: the device slug).
        ship: also copy it into the package (``trappm_ray/predictors/<device>/``).
        encoder: a predictor whose frozen pretrained encoder the networks read too (its sum-pooled
            embedding of each graph's v2 features beside the roofline inputs: TraPPM's recipe);
            "": none. With families held out it measured 11.4 / 12.5% MAPE against 12.3 / 13.3%
            without, at two seeds (``docs/training.md``).
        ray_address: an existing cluster; None = ``RAY_ADDRESS`` or a private local one.
    """

    labels: str = "data/labels"
    corpora: tuple[str, ...] = ()
    device: str = "rtx3090-amp"
    targets: tuple[str, ...] = ("train_step_ms", "inference_ms")
    seeds: tuple[int, ...] = (1337, 1338, 1339)
    max_epochs: int = 60
    auxiliary_targets: tuple[str, ...] = ("train_step_ms",)
    gnn_share: float | None = GNN_SHARE
    registry: str = "artifacts/predictors"
    name: str = ""
    ship: bool = False
    encoder: str = "trappm_ray/predictors/default"
    ray_address: str | None = None


def gnn_inputs(ex: list[dict], index: dict) -> list:
    """One prepared PyG ``Data`` per example of :func:`trappm_ray.train.gpu_examples.examples` (its
    ``rkey`` and static ``x``), as node classes only (the recipe trains on them); node features
    are built once per graph and setting and shared by its examples.

    Args:
        index: graph rows by (arch, resolution, batch size) (:func:`~trappm_ray.train.gpu_examples.graph_index`).
    """
    base: dict = {}
    out = []
    for e in ex:
        arch, res, bs, spec_slug, precision, _, _, torch2, compiled = e["rkey"]
        key = (arch, res, bs, spec_slug, precision, torch2, compiled)
        if key not in base:
            graph = row_to_graph(index[(arch, res, bs)])
            base[key] = prepare([to_data(node_arrays(graph, devices.get(spec_slug), precision, bool(torch2),
                                                     bool(compiled)))], keep_nodes=False)[0]
        out.append(with_static(base[key], e["x"]))
    return out


def distinct_graphs(ex: list[dict]) -> tuple[list[tuple], list[int]]:
    """The examples' distinct graph keys, and each example's position among them."""
    keys = [tuple(e["rkey"][:3]) for e in ex]
    unique = list(dict.fromkeys(keys))
    at = {k: i for i, k in enumerate(unique)}
    return unique, [at[k] for k in keys]


def graph_embeddings(encoder, ex: list[dict], index: dict, chunk: int = 64) -> torch.Tensor:
    """``[len(ex), d]``: each example's graph (v2 features) under the frozen ``encoder``, sum-pooled;
    a graph shared by several examples is embedded once. Graphs are built ``chunk`` at a time and
    let go once embedded: the RTX 3090's ~5,000 graphs with every node's features held at once
    took the process to 21.5 GB."""
    unique, at = distinct_graphs(ex)
    parts = []
    for i in range(0, len(unique), chunk):
        part = embed(encoder, [graph_data(row_to_graph(index[k]), "v2") for k in unique[i:i + chunk]], chunk)
        assert part is not None
        parts.append(part)
    return torch.cat(parts)[at]


def auxiliary_rows(aux: list[dict], held: set) -> np.ndarray:
    """Positions in ``aux`` (examples of another target of the same device) of the rows whose
    architecture is not in ``held`` (those stopped on or tested): what a network may learn from
    beside its own target's rows without seeing a held-out architecture at all."""
    return np.array([i for i, e in enumerate(aux) if e["arch"] not in held], int)


def gnn_recipe(max_epochs: int = 60):
    """The GPU predictors' recipe: ``nnlqp`` with one plain output (the target is already a
    ratio to the floor, so the batch-affine head has nothing to add), twice the CPU recipe's
    widths: on the RTX 3090's held-out architectures SAGEConv 128 / FC 256 measured 9.58% MAPE
    against 10.5% at 64 / 128 (same three splits, ``docs/training.md``)."""
    return replace(RECIPES["nnlqp"], batch_affine=False, max_epochs=max_epochs, hidden=128, fc=256)


def run_setting(ex: list[dict]) -> dict:
    """The framework setting a prediction is made in: PyTorch 2 where the labels include it (the
    version users run), eager unless every row was compiled."""
    col = {c: [e["setting"][SETTING_COLS.index(c)] for e in ex] for c in ("torch2", "compiled")}
    return {"torch2": int(max(col["torch2"])), "compiled": int(min(col["compiled"]))}


def train_gpu_predictor(cfg: GpuPredictorConfig) -> dict:
    """Fit targets x seeds networks with Ray and register them as one predictor.

    Returns:
        ``uri``, per-target held-out-architecture MAPE (mean over seeds), interval coverage
        inputs, per-task seconds and the wall time.
    """
    from trappm_ray.ray_init import ensure_ray

    t0 = time.perf_counter()
    ensure_ray(cfg.ray_address)
    index = graph_index(cfg.labels, cfg.corpora)
    ex, counts = examples(cfg.labels, cfg.corpora, (cfg.device,), index)
    ex = [e for e in ex if e["target"] in cfg.targets]
    if not ex:
        raise ValueError(f"no {cfg.device} label rows of {cfg.targets} join a graph under {cfg.labels}")
    targets = tuple(t for t in cfg.targets if any(e["target"] == t for e in ex))
    log.info("%s: %d examples (%s)", cfg.device, len(ex), counts)
    data = gnn_inputs(ex, index)
    ratio = np.array([e["measured"] / e["floor"] for e in ex])
    static = np.stack([e["x"] for e in ex]).astype(np.float64)
    recipe = gnn_recipe(cfg.max_epochs)
    source = P.Predictor.load(cfg.encoder) if cfg.encoder else None
    encoder = None if source is None else source.encoder
    if source is not None and encoder is None:
        raise ValueError(f"{cfg.encoder} has no pretrained encoder to read")
    emb = None if encoder is None else graph_embeddings(encoder, ex, index)
    if encoder is not None:
        recipe = replace(recipe, embedding="pretrained")
    data_ref, _ = share_graphs(data, None)
    example = data[0]
    del data
    calls, held_out, own_rows = {}, {}, {}
    for target in targets:
        idx = np.array([i for i, e in enumerate(ex) if e["target"] == target])
        other = np.array([i for i, e in enumerate(ex) if e["target"] != target
                          and target in cfg.auxiliary_targets], int)
        for seed in cfg.seeds:
            tr, va, held = split([ex[i] for i in idx], "arch", seed, test=0.15, val=0.0)
            held_out[(target, seed)] = held = idx[held]  # stopped on, then predicted for the band
            own_rows[(target, seed)] = idx[np.r_[tr, va]]
            train = np.r_[idx[np.r_[tr, va]], other[auxiliary_rows([ex[i] for i in other], {ex[i]["arch"] for i in held})]]
            calls[(target, seed)] = (fit_task, (data_ref, ratio, emb, train, held, held,
                                                recipe, seed), {"keep_model": True})
    results = fan_out(calls, f"fitting {cfg.device} GNN")
    with_mlp = cfg.gnn_share is None or cfg.gnn_share < 1.0
    heads, scalers, mlps, weights, residuals, held_mape, alone = {}, {}, {}, {}, {}, {}, {}
    for target in targets:
        heads[target], scalers[target], mlps[target], gnn, mlp = [], [], [], [], []
        for seed in cfg.seeds:
            r, held = results[(target, seed)], held_out[(target, seed)]
            head = build_regressor(example, 0 if emb is None else emb.size(1), recipe)
            head.load_state_dict(r["state"])
            heads[target].append(head)
            scalers[target].append(r["scaler"])
            gnn.append(np.maximum(r["pred"], 1e-6))
            if with_mlp:
                mlps[target].append(fit_static_mlp(static, ratio, own_rows[(target, seed)], held, seed)[0])
                mlp.append(mlps[target][-1].predict(static[held]))
            log.info("%s seed %s: held-out-arch MAPE %.2f%% at epoch %s/%s (%.0f s)", target, seed,
                     r["val_mape"], r["best_epoch"], r["epochs"], r["seconds"])
        held = [ratio[held_out[(target, s)]] for s in cfg.seeds]
        chosen = blend_weight(np.concatenate(gnn), np.concatenate(mlp), np.concatenate(held)) if mlp else 1.0
        w = chosen if cfg.gnn_share is None else cfg.gnn_share
        answers = [blend(g, m, w) for g, m in zip(gnn, mlp or gnn)]
        res = np.concatenate([np.log(y / np.maximum(a, 1.0)) for y, a in zip(held, answers)])
        residuals[target] = {"levels": list(LEVELS), "values": weighted_quantiles(res),
                             "rows": int(len(res))}
        held_mape[target] = float(np.mean([np.mean(np.abs(np.maximum(a, 1.0) / y - 1)) * 100
                                           for y, a in zip(held, answers)]))
        alone[target] = float(np.mean([results[(target, s)]["val_mape"] for s in cfg.seeds]))
        log.info("%s: the GNN's share of the blend %.1f (%.1f would fit the held-out architectures best), "
                 "held-out-arch MAPE %.2f%% (networks alone %.2f%%)", target, w, chosen, held_mape[target], alone[target])
        if mlp:
            weights[target] = w
    blended = None if not with_mlp else {
        "hidden": mlps[targets[0]][0].hidden, "weights": weights,
        "rule": "per seed exp(w log network + (1 - w) log static MLP); w " +
                ("chosen on the held-out rows" if cfg.gnn_share is None else "fixed (GpuPredictorConfig.gnn_share)")}
    manifest = manifest_of(cfg, ex, targets, recipe, residuals,
                           {"held_out_arch_mape_mean_over_seeds": held_mape,
                            "held_out_arch_mape_networks_alone": alone}, blended,
                           None if source is None else {**source.manifest.net.encoder, "source": cfg.encoder})
    manifest = manifest.replace(correction=correction_bounds(ex, index, manifest.launch),
                                layout=layout_factors(ex, index, manifest))
    uri = P.register(P.Predictor(manifest, encoder, heads, scalers, mlps if with_mlp else None), cfg.registry, cfg.name or cfg.device)
    anchors = from_examples(ex, index, cfg.device, manifest.net.run)  # what transfer to a GPU without labels moves
    anchors.save(uri)
    if cfg.ship:
        ship(uri, P.DEFAULT_DIR.parent / cfg.device)
    return {"uri": uri, "device": cfg.device, "examples": counts, "anchors": len(anchors),
            "held_out_arch_mape": held_mape, "networks_alone": alone, "gnn_share": weights,
            "task_seconds": {f"{t}/{s}": round(r["seconds"], 1) for (t, s), r in results.items()},
            "wall_s": round(time.perf_counter() - t0, 1)}


@dataclass
class LabelsOfPredictor:
    """A GPU predictor and its labels, to rewrite what is fitted from them beside its networks
    (its measured anchors, its correction bounds), the networks untouched.

    Args:
        uri: the predictor's directory (registered or shipped, e.g.
            ``trappm_ray/predictors/rtx3090-amp``); its manifest's ``run`` says which rows count.
        labels, corpora, device: as :class:`GpuPredictorConfig`.
    """

    uri: str = "trappm_ray/predictors/rtx3090-amp"
    labels: str = "data/labels"
    corpora: tuple[str, ...] = ()
    device: str = "rtx3090-amp"


def write_anchors(cfg: LabelsOfPredictor) -> dict:
    """Build the device's anchors (:func:`~trappm_ray.model.anchors.from_examples`) and store them
    at ``cfg.uri``, as :func:`train_gpu_predictor` does after training."""
    run = read_manifest(cfg.uri).net.run
    index = graph_index(cfg.labels, cfg.corpora)
    ex, _ = examples(cfg.labels, cfg.corpora, (cfg.device,), index)
    anchors = from_examples(ex, index, cfg.device, run)
    return {"path": anchors.save(cfg.uri), "anchors": len(anchors), "examples": len(ex)}


def write_correction(cfg: LabelsOfPredictor) -> dict:
    """Fit what the step model reads from the device's labels, the host's time per kernel
    (:func:`trappm_ray.model.launch.profiles`), the correction bounds
    (:func:`~trappm_ray.train.correction_fit.correction_bounds`) and the layout factors
    (:func:`layout_factors`), and store them in the manifest at ``cfg.uri`` (its networks
    untouched), as :func:`train_gpu_predictor` does."""
    manifest = read_manifest(cfg.uri)
    index = graph_index(cfg.labels, cfg.corpora)
    ex, _ = examples(cfg.labels, cfg.corpora, (cfg.device,), index)
    profiles = launch.profiles(ex)
    bounds = correction_bounds(ex, index, profiles)
    layout = layout_factors(ex, index, manifest)
    rewrite_manifest(cfg.uri, manifest.replace(launch=profiles, correction=bounds, layout=layout))
    return {"uri": cfg.uri, "examples": len(ex), "launch": profiles, "correction": bounds, "layout": layout}


def layout_factors(ex: list[dict], index: dict, manifest: Manifest) -> dict[str, dict]:
    """Per target whose labels measure graphs in both layouts, the NHWC / NCHW factors per kind of
    kernel (:func:`~trappm_ray.train.layout_fit.fit_layout`), as a manifest stores them."""
    runs = {t: run_key(r) for t, r in manifest.net.run.items()}  # the framework setting it answers in
    fitted = fit_layout(ex, layout_rows(ex, index), manifest.device.name, runs=runs)
    for target, f in fitted.items():
        log.info("%s: channels-last factors from %d pairs of %d families, family-out band %.2f-%.2fx", target,
                 f.rows, f.families, math.exp(f.band[0]), math.exp(f.band[1]))
    return {t: f.to_dict() for t, f in fitted.items()}


def manifest_of(cfg: GpuPredictorConfig, ex: list[dict], targets, recipe, residuals, metrics: dict,
                blend: dict | None, encoder: dict | None = None) -> Manifest:
    rows = [r for r in ok_labels(cfg.labels, cfg.device).to_pylist() if (r.get("gpus") or 1) == 1]
    dates = sorted(r["date"] for r in rows if r.get("date"))
    device = label_device(rows, cfg.device, ex[0]["spec"])
    graphs = list({tuple(e["rkey"][:3]): e for e in ex}.values())  # one row per graph
    return Manifest(
        name=cfg.name or cfg.device, kind=NETWORK, feature_set="v2", targets=tuple(targets),
        units={t: unit(t) for t in targets},
        network=Network(
            seeds=tuple(cfg.seeds), inputs=INPUTS, encoder=encoder, blend=blend,
            head={"hidden": recipe.hidden, "fc": recipe.fc, "dropout": recipe.dropout,
                  "node_dropout": recipe.node_dropout, "batch_affine": [], "static_dim": STATIC_DIM},
            run={t: run_setting([e for e in ex if e["target"] == t]) for t in targets}),
        recipe={"name": "roofline-gnn", **asdict(recipe)},
        device=device, options=label_options(rows),
        envelope_top=envelope_top([int(r["batch_size"]) for r in rows], device.kind),
        data={"labels": len(ex), "per_target": {t: sum(e["target"] == t for e in ex) for t in targets},
              "architectures": len({e["arch"] for e in ex}),
              "families": sorted({e["family"] for e in ex}),
              "model_sources": sorted({r["model_source"] for r in rows if r.get("model_source")}),
              "sha256_16": data_hash(cfg.labels, cfg.device),
              "label_dates": [dates[0], dates[-1]] if dates else None},
        domain=fit_domain(np.stack([e["x"][:len(V2_STATIC)] for e in graphs]), [e["family"] for e in graphs]),
        residual_quantiles=residuals, launch=launch.profiles(ex),
        intervals="split-conformal on held-out-architecture residuals, pooled over seeds",
        metrics=metrics, command=f"python jobs/train_gpu_predictor.py --device {cfg.device}",
        code_version=P.code_version(), torch=torch.__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"))


__all__ = ["GpuPredictorConfig", "LabelsOfPredictor", "auxiliary_rows", "distinct_graphs", "graph_embeddings", "gnn_inputs", "gnn_recipe", "run_setting",
           "train_gpu_predictor", "write_anchors", "write_correction", "layout_factors", "manifest_of"]
