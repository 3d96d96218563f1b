"""The GNN variants of the GPU evaluation.

``gnn``: the shipped GPU predictors' recipe (:mod:`trappm_ray.train.gpu_predictor`): the supervised GraphSAGE regressor (the ``nnlqp`` recipe of
:mod:`trappm_ray.train.regressors`, no pretrained encoder) on v2 node features with the per-node
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
from trappm_ray.train.gpu_predictor import auxiliary_rows, gnn_inputs, gnn_recipe
from trappm_ray.train.regressors import RECIPES, embed, fit, for_target, predict_rows, prepare

log = logging.getLogger(__name__)


def gnn_model(ex: list[dict], index: dict, max_epochs: int = 60, seeds: int = 3,
              auxiliary: list[dict] | None = None):
    """A model function for :func:`trappm_ray.evaluate.gpu.fit_predict` (``extra``): fits the
    ``nnlqp`` recipe on ``ex``'s train rows (validation picks the epoch) once per seed and
    returns the mean of their ms, as a shipped predictor answers with its seed ensemble.

    Args:
        ex: the task's examples (the function is only valid for this list).
        index: graph rows by key.
        max_epochs: epoch cap (the recipe stops 10 epochs after its best validation epoch).
        seeds: networks averaged (the shipped GPU predictors hold 3).
        auxiliary: the same device's examples of its other targets, trained on too
            (:func:`~trappm_ray.train.gpu_predictor.auxiliary_rows`: never of an architecture
            among the validation or test rows).
    """
    aux = list(auxiliary or [])
    data = gnn_inputs(ex + aux, index)
    ratio = np.array([e["measured"] / e["floor"] for e in ex + aux])
    floor = np.array([e["floor"] for e in ex])
    recipe = gnn_recipe(max_epochs)
    log.info("gnn: %d examples + %d auxiliary", len(ex), len(aux))

    def run(_ex, train, val, idx, seed) -> np.ndarray:
        torch.set_num_threads(1)
        held = {ex[i]["arch"] for i in np.r_[val, idx].astype(int)}
        train = np.r_[train, len(ex) + auxiliary_rows(aux, held)].astype(int)
        ratios = []
        for k in range(seeds):
            out = fit(data, ratio, None, train, val, recipe, seed + k)
            ratios.append(predict_rows(out["model"], out["scaler"], data, None, idx))
        return np.mean(ratios, 0) * floor[idx]

    return run


def encoder_recipe_model(ex: list[dict], index: dict, encoder, target: str, max_epochs: int = 60):
    """A model function for :func:`trappm_ray.evaluate.gpu.fit_predict` (``extra``): the CPU
    predictor's recipe (``trappm-ray``, frozen ``encoder``) fitted on ``ex``'s train rows of
    ``target``, returning ms.

    Args:
        ex: the task's examples. index: graph rows by key.
        encoder: the pretrained graph encoder (a shipped predictor's ``encoder``).
        target: ``train_step_ms`` or ``inference_ms`` (the recipe's output head follows it).
    """
    graphs: dict = {}
    data = []
    for e in ex:
        key = tuple(e["rkey"][:3])
        if key not in graphs:
            graphs[key] = prepare([graph_data(row_to_graph(index[key]), "v2")])[0]
        data.append(graphs[key])
    emb = embed(encoder, data)
    y = np.array([e["measured"] for e in ex])
    recipe = replace(for_target(RECIPES["trappm-ray"], target), max_epochs=max_epochs)
    log.info("encoder-recipe: %d examples", len(ex))

    def run(_ex, train, val, idx, seed) -> np.ndarray:
        torch.set_num_threads(1)
        out = fit(data, y, emb, train, val, recipe, seed)
        return predict_rows(out["model"], out["scaler"], data, emb, idx)

    return run


__all__ = ["gnn_model", "encoder_recipe_model"]
