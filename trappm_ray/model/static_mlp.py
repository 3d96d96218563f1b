"""A small MLP on a graph's static vector, and its blend with the GNN.

The static MLP sees only graph-level numbers (v2 static features, log roofline terms, the
device's spec vector, run settings), so an unusual operator or block pattern cannot throw it
off the way it can a GNN reading every node; the GNN in turn ranks architectures of known
families better. Their errors on families neither saw are partly independent, so the GPU
predictors answer with the geometric blend ``exp(w log gnn + (1 - w) log mlp)`` with the GNN's share
``w`` = :data:`GNN_SHARE`, the same in the shipped predictors and in the evaluation of their recipe;
:func:`blend_weight` chooses it on held-out rows instead (the evaluation's ``gnn-val-share``).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn


class StaticMLP(nn.Module):
    """Two hidden ReLU layers on the z-scored static vector, predicting a positive quantity in
    log space (the paper's MLP baseline, here also a member of the GPU predictors).

    The input and target scalings are buffers, so a saved state dict is the whole model. An input
    constant on the training rows (a CPU flag when only GPUs trained) has an infinite scale: the
    net never saw it vary, so it reads 0 whatever its value. A ReLU net extrapolates linearly, and
    far outside its inputs (an unseen device) its log output can overflow ``exp``: it is clipped to
    the training targets' range widened by e^2 either way.

    Args:
        in_dim: static vector size. hidden: width of both hidden layers.
    """

    def __init__(self, in_dim: int, hidden: int = 128):
        super().__init__()
        self.hidden = hidden
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, 1))
        for name, shape in (("x_mean", (in_dim,)), ("x_std", (in_dim,)), ("y_mean", ()),
                            ("y_std", ()), ("log_lo", ()), ("log_hi", ())):
            self.register_buffer(name, torch.ones(shape, dtype=torch.float64))

    def z(self, x: Tensor) -> Tensor:
        """Standardized float32 inputs of raw ``[N, in_dim]`` static vectors."""
        return ((x.double() - self.x_mean) / self.x_std).float()

    def forward(self, x: Tensor) -> Tensor:
        """Log predictions ``[N]`` (float64) of raw static vectors ``x``."""
        out = self.net(self.z(x)).squeeze(1).double() * self.y_std + self.y_mean
        return out.clamp(self.log_lo, self.log_hi)

    @torch.no_grad()
    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predictions (not logs) of raw static vectors."""
        return torch.exp(self(torch.as_tensor(x))).numpy()


def fit_static_mlp(x: np.ndarray, y: np.ndarray, train_idx, val_idx, seed: int, hidden: int = 128,
                   lr: float = 2e-3, max_epochs: int = 400, patience: int = 40) -> tuple[StaticMLP, float]:
    """Full-batch Adam on the Huber loss of the standardized log target; the epoch with the
    least MAPE on ``val_idx`` is kept.

    Args:
        x: ``[N, D]`` raw static vectors. y: ``[N]`` positive targets.
        train_idx, val_idx: rows fitted, rows stopped on.

    Returns:
        The model (eval mode) and its validation MAPE in percent.
    """
    torch.manual_seed(seed)
    ly = np.log(y)
    model = StaticMLP(x.shape[1], hidden)
    with torch.no_grad():
        std = x[train_idx].std(0)
        for name, value in (("x_mean", x[train_idx].mean(0)), ("x_std", np.where(std > 0, std + 1e-6, np.inf)),
                            ("y_mean", ly[train_idx].mean()), ("y_std", ly[train_idx].std() + 1e-6),
                            ("log_lo", ly[train_idx].min() - 2.0), ("log_hi", ly[train_idx].max() + 2.0)):
            getattr(model, name).copy_(torch.as_tensor(value))
    zt = model.z(torch.as_tensor(x, dtype=torch.float64))
    yt = torch.tensor((ly - float(model.y_mean)) / float(model.y_std), dtype=torch.float32)
    opt = torch.optim.Adam(model.net.parameters(), lr=lr)
    best, best_epoch, state = float("inf"), 0, None
    for epoch in range(1, max_epochs + 1):
        model.train()
        loss = nn.functional.huber_loss(model.net(zt[train_idx]).squeeze(1), yt[train_idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        val = float(np.mean(np.abs(model.predict(x[val_idx]) / y[val_idx] - 1)))
        if val < best:
            best, best_epoch, state = val, epoch, {k: v.clone() for k, v in model.state_dict().items()}
        elif epoch - best_epoch >= patience:
            break
    model.load_state_dict(state)
    model.eval()
    return model, best * 100


WEIGHTS = np.round(np.linspace(0.0, 1.0, 11), 2)
# The median of the shares chosen on validation families in the five family folds of the GPU
# evaluation (0.7, 0.0, 0.8, 0.6, 0.7; python jobs/evaluate_gpu.py, 2026-11-26): tuned for a
# model of an unseen family, a user's usual case. Chosen on held-out architectures instead the
# share comes out 0.9-1.0, which leaves an unseen family to the GNN alone (docs/training.md).
GNN_SHARE = 0.7


def blend(gnn: np.ndarray, mlp: np.ndarray, w: float) -> np.ndarray:
    """``exp(w log gnn + (1 - w) log mlp)``: the GNN's share ``w`` of the answer in log space."""
    return np.exp(w * np.log(gnn) + (1.0 - w) * np.log(mlp))


def blend_weight(gnn: np.ndarray, mlp: np.ndarray, measured: np.ndarray, floor: float | np.ndarray = 1.0) -> float:
    """The GNN's share in :func:`blend` (a multiple of 0.1) with the least MAPE on held-out rows,
    answers clamped to ``floor`` as the predictor clamps them; ties go to the larger share.

    Args:
        gnn, mlp, measured: the two models' answers and the measurements, in one unit.
    """
    err = np.array([np.mean(np.abs(np.maximum(blend(gnn, mlp, w), floor) / measured - 1)) for w in WEIGHTS])
    return float(WEIGHTS[err <= err.min() + 1e-12].max())


__all__ = ["StaticMLP", "fit_static_mlp", "WEIGHTS", "GNN_SHARE", "blend", "blend_weight"]
