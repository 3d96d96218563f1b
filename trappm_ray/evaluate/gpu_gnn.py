"""The GNN variants of the GPU evaluation.

``gnn``: the shipped GPU predictors' recipe (:mod:`trappm_ray.train.gpu_predictor`): the supervised GraphSAGE regressor (the ``nnlqp`` recipe of
:mod:`trappm_ray.train.regressors`; without a pretrained encoder unless ``GnnModel(encoder=...)``,
as the RTX 3090's ships since 2026-11-30) on v2 node features with the per-node
roofline features appended (:func:`trappm_ray.physics.roofline.node_features`), the GPU
evaluation's graph-level inputs as its static vector (v2 static + log roofline terms + device spec
vector + run settings), predicting log(measured / roofline floor).

``encoder-recipe``: the CPU predictor's recipe (``trappm-ray``: the frozen pretrained encoder's
embedding, v2 features and static vector, log of the measured time; no roofline input), with the
encoder of a shipped predictor; the RTX 3090 predictor was trained so until 2026-11-24.
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import torch

from trappm_ray.graph.data import graph_data
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.model.static_mlp import GNN_SHARE, blend, blend_weight, fit_static_mlp
from trappm_ray.train.gpu_predictor import auxiliary_rows, distinct_graphs, gnn_inputs, gnn_recipe, graph_embeddings
from trappm_ray.train.fanout import fan_out, share_graphs
from trappm_ray.train.regressors import RECIPES, embed, fit, fit_task, for_target, predict_rows, prepare

log = logging.getLogger(__name__)


class GnnModel:
    """A model function for :func:`trappm_ray.evaluate.gpu.fit_predict` (``extra``): fits the
    ``nnlqp`` recipe on ``ex``'s train rows (validation picks the epoch) once per seed, and beside
    each network a :class:`~trappm_ray.model.static_mlp.StaticMLP` on the same target's train
    rows; the two are blended with the GNN's share ``share``, and the seeds' blends averaged, as
    a shipped predictor answers. :meth:`val_share` blends with the share chosen on the split's
    validation rows instead, :meth:`alone` is the same networks without the MLP.

    Every network is one Ray task (:func:`~trappm_ray.train.fanout.fan_out`); :meth:`prefit` fits
    the networks of many splits at once, and a call whose split was prefitted returns its
    predictions.

    Args:
        ex: the task's examples (the model is only valid for this list).
        index: graph rows by key.
        max_epochs: epoch cap (the recipe stops 10 epochs after its best validation epoch).
        seeds: networks averaged (the shipped GPU predictors hold 3).
        auxiliary: the same device's examples of its other targets, trained on too
            (:func:`~trappm_ray.train.gpu_predictor.auxiliary_rows`: never of an architecture
            among the validation or test rows).
        share: the GNN's share of the blend (the shipped predictors': :data:`~trappm_ray.model.static_mlp.GNN_SHARE`).
        encoder: a pretrained graph encoder (a shipped predictor's): the networks also read its
            frozen, sum-pooled embedding of each graph's v2 features (the TraPPM recipe's input)
            beside the node classes and roofline features; None: the shipped recipe, unpretrained.
    """

    def __init__(self, ex: list[dict], index: dict, max_epochs: int = 60, seeds: int = 3,
                 auxiliary: list[dict] | None = None, share: float = GNN_SHARE, encoder=None):
        self.ex, self.aux, self.seeds, self.share = ex, list(auxiliary or []), seeds, share
        self.data = gnn_inputs(ex + self.aux, index)
        self.ratio = np.array([e["measured"] / e["floor"] for e in ex + self.aux])
        self.floor = np.array([e["floor"] for e in ex])
        self.static = np.stack([e["x"] for e in ex]).astype(np.float64)
        self.recipe = gnn_recipe(max_epochs)
        self.emb = None if encoder is None else graph_embeddings(encoder, ex + self.aux, index)
        if encoder is not None:
            self.recipe = replace(self.recipe, embedding="pretrained")
        self.done: dict[tuple, dict[str, np.ndarray]] = {}
        self.weights: list[tuple[str, float]] = []  # (label, the share chosen on validation) per split
        log.info("gnn: %d examples + %d auxiliary", len(ex), len(self.aux))

    def training_rows(self, train, val, idx) -> np.ndarray:
        """``train`` and the auxiliary rows of no architecture among ``val`` and ``idx`` (indices
        into ``ex + auxiliary``)."""
        held = {self.ex[i]["arch"] for i in np.r_[val, idx].astype(int)}
        return np.r_[train, len(self.ex) + auxiliary_rows(self.aux, held)].astype(int)

    @staticmethod
    def _key(train, val, idx, seed) -> tuple:
        return tuple(np.asarray(a, np.int64).tobytes() for a in (train, val, idx)) + (seed,)

    def prefit(self, jobs: list[tuple], label: str = "") -> None:
        """Fit ``(train, val, idx, seed)`` splits, every seed's network one Ray task; ``label``
        names them in :attr:`weights`."""
        from trappm_ray.ray_init import ensure_ray

        ensure_ray(None)
        data_ref, _ = share_graphs(self.data, None)
        # the embeddings are small ([rows, d]): passed by value to every task
        calls = {(j, k): (fit_task, (data_ref, self.ratio, self.emb, self.training_rows(train, val, idx), val, idx,
                                     self.recipe, seed + k), {})
                 for j, (train, val, idx, seed) in enumerate(jobs) for k in range(self.seeds)}
        out = fan_out(calls, "GPU evaluation GNN")
        ratio = self.ratio[:len(self.ex)]
        for j, (train, val, idx, seed) in enumerate(jobs):
            idx, nval = np.asarray(idx, int), len(val)
            gnn = np.maximum([out[(j, k)]["pred"] for k in range(self.seeds)], 1e-6)
            mlp = np.array([fit_static_mlp(self.static, ratio, train, val, seed + k)[0].predict(self.static[idx])
                            for k in range(self.seeds)])
            w = blend_weight(gnn[:, :nval].ravel(), mlp[:, :nval].ravel(), np.tile(ratio[idx[:nval]], self.seeds))
            self.weights.append((label, w))
            log.info("gnn: the GNN's share chosen on %d validation rows %.1f", nval, w)
            self.done[self._key(train, val, idx, seed)] = {
                "gnn": blend(gnn, mlp, self.share).mean(0) * self.floor[idx],
                "val-share": blend(gnn, mlp, w).mean(0) * self.floor[idx], "alone": gnn.mean(0) * self.floor[idx]}

    def _answer(self, variant: str, train, val, idx, seed) -> np.ndarray:
        key = self._key(train, val, idx, seed)
        if key not in self.done:
            self.prefit([(train, val, idx, seed)])
        pred = self.done[key].pop(variant)
        if not self.done[key]:
            del self.done[key]
        return pred

    def __call__(self, _ex, train, val, idx, seed) -> np.ndarray:
        return self._answer("gnn", train, val, idx, seed)

    def val_share(self, _ex, train, val, idx, seed) -> np.ndarray:
        """The blend with the GNN's share chosen on the split's validation rows (the ablation row
        ``gnn-val-share``; the shares are in :attr:`weights`)."""
        return self._answer("val-share", train, val, idx, seed)

    def alone(self, _ex, train, val, idx, seed) -> np.ndarray:
        """The networks' answer without the static MLP (the ablation row ``gnn-alone``)."""
        return self._answer("alone", train, val, idx, seed)


def _v2_graphs(ex: list[dict], index: dict) -> tuple[list, list[int]]:
    """The examples' distinct graphs as v2 data (each built once), and each example's position
    among them."""
    unique, at = distinct_graphs(ex)
    return prepare([graph_data(row_to_graph(index[k]), "v2") for k in unique]), at


def encoder_recipe_model(ex: list[dict], index: dict, encoder, target: str, max_epochs: int = 60):
    """A model function for :func:`trappm_ray.evaluate.gpu.fit_predict` (``extra``): the CPU
    predictor's recipe (``trappm-ray``, frozen ``encoder``) fitted on ``ex``'s train rows of
    ``target``, returning ms.

    Args:
        ex: the task's examples. index: graph rows by key.
        encoder: the pretrained graph encoder (a shipped predictor's ``encoder``).
        target: ``train_step_ms`` or ``inference_ms`` (the recipe's output head follows it).
    """
    graphs, at = _v2_graphs(ex, index)
    data = [graphs[i] for i in at]
    pooled = embed(encoder, graphs)  # each distinct graph once
    emb = None if pooled is None else pooled[at]
    y = np.array([e["measured"] for e in ex])
    recipe = replace(for_target(RECIPES["trappm-ray"], target), max_epochs=max_epochs)
    log.info("encoder-recipe: %d examples", len(ex))

    def run(_ex, train, val, idx, seed) -> np.ndarray:
        torch.set_num_threads(1)
        out = fit(data, y, emb, train, val, recipe, seed)
        return predict_rows(out["model"], out["scaler"], data, emb, idx)

    return run


__all__ = ["GnnModel", "encoder_recipe_model"]
