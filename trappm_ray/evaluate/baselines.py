"""Baselines that see only a graph's static features (the paper's MLP and XGBoost), and the
analytic training-memory estimate.

All learn the target in log space, like the GNN regressors, and pick their stopping point on the
validation split.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from trappm_ray.graph.features import V2_STATIC
from trappm_ray.model.static_mlp import fit_static_mlp


def static_matrix(data) -> np.ndarray:
    """``[G, 9]`` v2 static features (log-scaled) of prepared ``v2`` graphs."""
    return torch.cat([d.static for d in data]).numpy().astype(np.float64)


def fit_mlp(x: np.ndarray, y: np.ndarray, train_idx, val_idx, seed: int, hidden: int = 128,
            lr: float = 2e-3, max_epochs: int = 400, patience: int = 40) -> dict:
    """Two-hidden-layer MLP on z-scored static features, log target, full-batch Adam
    (:func:`~trappm_ray.model.static_mlp.fit_static_mlp`)."""
    t0 = time.perf_counter()
    model, val = fit_static_mlp(x, y, train_idx, val_idx, seed, hidden, lr, max_epochs, patience)
    return {"predict": lambda idx: model.predict(x[idx]), "val_mape": val,
            "seconds": time.perf_counter() - t0}


def fit_xgboost(x: np.ndarray, y: np.ndarray, train_idx, val_idx, seed: int) -> dict:
    """Gradient-boosted trees on static features, log target; depth grid-searched on val."""
    import xgboost as xgb

    t0 = time.perf_counter()
    ly = np.log(y)
    dtrain = xgb.DMatrix(x[train_idx], label=ly[train_idx])
    dval = xgb.DMatrix(x[val_idx], label=ly[val_idx])
    best = None
    for depth in (3, 5, 7):
        params = {"max_depth": depth, "eta": 0.05, "subsample": 0.8, "colsample_bytree": 0.9,
                  "seed": seed, "nthread": 1, "objective": "reg:squarederror"}
        booster = xgb.train(params, dtrain, num_boost_round=600, evals=[(dval, "val")],
                            early_stopping_rounds=50, verbose_eval=False)
        rounds = (0, booster.best_iteration + 1)
        val = float(np.mean(np.abs(np.exp(booster.predict(dval, iteration_range=rounds))
                                   / y[val_idx] - 1)) * 100)
        if best is None or val < best[0]:
            best = (val, booster, rounds)
    _, booster, rounds = best
    return {"predict": lambda idx: np.exp(booster.predict(xgb.DMatrix(x[idx]), iteration_range=rounds)
                                          .astype(np.float64)),
            "val_mape": best[0], "seconds": time.perf_counter() - t0}


def analytic_memory_mb(x: np.ndarray) -> np.ndarray:
    """The featurizer's analytic training-memory estimate (weights, gradients, Adam moments,
    saved activations), in MB, recovered from the log-scaled static column."""
    from trappm_ray.graph.features import LOG_SCALE

    col = V2_STATIC.index("train_memory_estimate_bytes")
    return np.expm1(x[:, col] / LOG_SCALE) / 2**20


def fit_analytic(x: np.ndarray, y: np.ndarray, train_idx, val_idx, seed: int) -> dict:
    """Analytic estimate times one factor (the median ratio measured/estimate on train data):
    the estimate counts tensors, a device adds allocator and runtime overheads."""
    t0 = time.perf_counter()
    est = analytic_memory_mb(x)
    factor = float(np.median(y[train_idx] / est[train_idx]))
    predict = lambda idx: est[idx] * factor  # noqa: E731
    val = float(np.mean(np.abs(predict(val_idx) / y[val_idx] - 1)) * 100)
    return {"predict": predict, "val_mape": val, "seconds": time.perf_counter() - t0,
            "factor": factor}


STATIC_MODELS = {"mlp": fit_mlp, "xgboost": fit_xgboost, "analytic": fit_analytic}


def fit_static_task(x: np.ndarray, y: np.ndarray, train_idx, val_idx, test_idx, model: str,
                    seed: int) -> dict:
    """Body of one Ray task: fit a static baseline and predict ``test_idx``."""
    torch.set_num_threads(1)
    out = STATIC_MODELS[model](x, y, np.asarray(train_idx), np.asarray(val_idx), seed)
    pred = out["predict"](np.asarray(test_idx)) if len(test_idx) else np.empty(0)
    return {"pred": pred, "val_mape": out["val_mape"], "seconds": out["seconds"]}


__all__ = ["static_matrix", "fit_mlp", "fit_xgboost", "analytic_memory_mb", "fit_analytic",
           "STATIC_MODELS", "fit_static_task"]
