"""Phase 2 of TraPPM: per-target GNN regressors on the frozen encoder, trained as Ray tasks.

One regressor per (target, seed). Inputs per graph: node features (two SAGEConv layers, sum
pooled), the sum-pooled embedding of the frozen pretrained encoder (computed once, since the
encoder is frozen) and the static features. Training picks the epoch with the lowest MAPE on a
validation split and stops after ``patience`` epochs without improvement; the test split is never
looked at here. Recipes (:data:`RECIPES`) name the variants compared in the evaluation: this
project's regressor, the published TraPPM recipe, the NNLQP-style regressor without pretraining,
and the random-encoder ablation.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from trappm_ray.model.networks import GraphEncoder, Regressor, neighbor_mean, pooled_embedding
from trappm_ray.model.node_classes import CLASS_KEYS, CLASS_LEVELS, ClassBatch, node_classes
from trappm_ray.model.predictor import Scaler
from trappm_ray.targets import BATCH_AFFINE

SEEDS = (1337, 1338, 1339, 1340, 1341)


@dataclass(frozen=True)
class Recipe:
    """How one GNN regressor is built and trained.

    Args:
        feature_set: ``v2`` or ``trappm-v1``.
        embedding: ``pretrained`` (the frozen encoder), ``random`` (a frozen random-init encoder
            of the same shape: the ablation) or ``none`` (NNLQP-style supervised GNN).
        scaling: ``log`` (static and embedding z-scored on train data, target z-scored in log
            space, Huber loss: relative error) or ``published`` (raw node features, static
            features z-scored within each graph's own vector, raw target, MSE).
        hidden, fc, dropout: regressor sizes (published: 512, 512, 0.05).
        node_dropout: dropout on node embeddings too (published), not only on the FC layers.
        lr, batch_size, max_epochs, patience: Adam learning rate, graphs per step, epoch cap,
            and epochs without validation improvement before stopping.
        huber_delta: the Huber loss's delta on the z-scored log target (``log`` scaling): below
            it the loss is squared error, above it absolute error.
        batch_affine: predict ``fixed + per_sample * batch_size`` (both parts from the graph)
            for the targets in :data:`trappm_ray.targets.BATCH_AFFINE` (see
            :class:`~trappm_ray.model.networks.Regressor`); the published recipe predicts the value.
        select: the epoch kept: ``validation`` (lowest validation MAPE, early stopping after
            ``patience``) or ``train_loss`` (lowest mean training loss over all ``max_epochs``,
            as the published code does).
    """

    feature_set: str = "v2"
    embedding: str = "pretrained"
    scaling: str = "log"
    hidden: int = 64
    fc: int = 128
    dropout: float = 0.05
    node_dropout: bool = False
    lr: float = 2e-3
    batch_size: int = 32
    max_epochs: int = 60
    patience: int = 10
    huber_delta: float = 1.0
    batch_affine: bool = True
    select: str = "validation"


# Memory is affine in the batch size within 1.6% per architecture on this project's CPU labels
# (step time only within 6.7%: caches and kernel choices bend it; power saturates). On the
# 954-row labels the affine head matched the plain one on the random split and beat it on held-out
# architectures for memory, and lost about 1.4 points on step time (2 seeds, 60 epochs).

RECIPES = {
    "trappm-ray": Recipe(),
    "trappm-published": Recipe(feature_set="trappm-v1", scaling="published", lr=1e-3,
                               node_dropout=True, batch_affine=False),
    "nnlqp": Recipe(embedding="none"),
    "random-encoder": Recipe(embedding="random"),
}


def for_target(recipe: Recipe, target: str) -> Recipe:
    """``recipe`` as used for ``target``: the batch-affine output only where it applies."""
    return replace(recipe, batch_affine=recipe.batch_affine and target in BATCH_AFFINE)


def build_regressor(example: Data, emb_dim: int, recipe: Recipe) -> Regressor:
    """An untrained regressor for graphs shaped like ``example`` under ``recipe``."""
    in_dim = (example.x if "x" in example else example.u_x).size(1)
    return Regressor(in_dim, example.static.size(1), emb_dim, recipe.hidden, recipe.fc,
                     recipe.dropout, node_dropout=recipe.node_dropout,
                     batch_affine=recipe.batch_affine, published_head=recipe.scaling == "published")


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - true) / np.abs(true)) * 100)


def rmse(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred - true) ** 2)))


def prepare(data: list[Data], classes: bool = True, keep_nodes: bool = True) -> list[Data]:
    """Copies of ``data`` carrying the cached first-layer aggregation ``agg`` and, with
    ``classes``, the node classes that training runs on (:mod:`trappm_ray.model.node_classes`).
    ``keep_nodes=False`` (with ``classes``) drops the per-node fields (``x``, ``agg``,
    ``edge_index``): a recipe without node dropout trains and predicts on the classes alone, in
    several times less memory."""
    if not (keep_nodes or classes):
        raise ValueError("keep_nodes=False needs classes")
    out = []
    for d in data:
        d = d.clone()
        d.agg = neighbor_mean(d.x, d.edge_index)
        if classes:
            for k, v in node_classes(d.x, d.agg, d.edge_index).items():
                d[k] = v
        if not keep_nodes:
            for k in ("x", "agg", "edge_index"):
                del d[k]
        out.append(d)
    return out


# which count each per-graph array's rows follow (any other key: one row per graph)
_LEVELS = {"x": "node", "agg": "node", "edge_index": "edge", **CLASS_LEVELS}
_LEVEL_SIZE = {"node": lambda d: d.num_nodes, "edge": lambda d: d.edge_index.size(1),
               "u1": lambda d: d.u_x.size(0), "u2": lambda d: d.u_root.size(0),
               "ue": lambda d: d.u_src.size(0)}


def pack_graphs(data: list[Data]) -> dict[str, np.ndarray]:
    """Prepared graphs as a few flat numpy arrays, for ``ray.put``.

    Ray keeps numpy arrays once in shared memory and tasks map them without copying; a list of
    ``Data`` objects is unpickled again by every task (about 16 s per task for 1,367 graphs, and
    one private copy of the dataset per worker).
    """
    keys = [k for k in data[0].keys() if k != "num_nodes"]
    out = {f"{level}_offsets": np.array([0] + [size(d) for d in data]).cumsum()
           for level, size in _LEVEL_SIZE.items() if any(_LEVELS.get(k) == level for k in keys)}
    for k in keys:
        dim = 1 if k == "edge_index" else 0
        out[k] = torch.cat([d[k] for d in data], dim).numpy()
    return out


def unpack_graphs(packed: dict[str, np.ndarray]) -> list[Data]:
    """The graphs of :func:`pack_graphs`, as ``Data`` objects viewing the packed arrays."""
    with warnings.catch_warnings():  # read-only shared memory: nothing here writes to it
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        t = {k: torch.from_numpy(v) for k, v in packed.items() if not k.endswith("_offsets")}
    nodes = packed.get("node_offsets")  # absent for graphs prepared without their nodes
    out = []
    for i in range(len(packed["static"])):
        d = {}
        for k, v in t.items():
            level = _LEVELS.get(k)
            lo, hi = (i, i + 1) if level is None else packed[f"{level}_offsets"][i:i + 2]
            d[k] = v[:, lo:hi] if k == "edge_index" else v[lo:hi]
        out.append(Data(**d) if nodes is None else Data(**d, num_nodes=int(nodes[i + 1] - nodes[i])))
    return out


def embed(encoder: GraphEncoder | None, data: list[Data], chunk: int = 64) -> torch.Tensor | None:
    """Sum-pooled embeddings ``[G, d]`` of every graph under a frozen encoder (None: none)."""
    if encoder is None:
        return None
    parts = []
    for i in range(0, len(data), chunk):
        b = Batch.from_data_list(data[i:i + chunk], exclude_keys=list(CLASS_KEYS))
        parts.append(pooled_embedding(encoder, b.x, b.edge_index, b.batch, b.num_graphs))
    return torch.cat(parts)


def random_encoder(like: GraphEncoder, seed: int = 0) -> GraphEncoder:
    """A randomly initialised encoder of the same shape as ``like`` (the ablation)."""
    torch.manual_seed(seed)
    return GraphEncoder(like.in_dim, like.dims, like.dropout).eval()


class _Published:
    """The published recipe's input handling: raw target and features, static z-scored within
    each graph's vector (which discards their absolute scale). Same interface as Scaler."""

    def static(self, s: torch.Tensor) -> torch.Tensor:
        return (s - s.mean(1, keepdim=True)) / s.std(1, keepdim=True).clamp_min(1e-6)

    def emb(self, e):
        return e

    def y(self, y: torch.Tensor) -> torch.Tensor:
        return y

    def y_inverse(self, z: torch.Tensor) -> torch.Tensor:
        return z


@dataclass
class _ClassInputs:
    """A mini-batch as node classes, with the per-graph inputs of the readout."""

    classes: ClassBatch
    static: torch.Tensor
    log_samples: torch.Tensor


def _collate(graphs: list[Data], classes: bool):
    if not classes:
        return Batch.from_data_list(graphs)
    return _ClassInputs(ClassBatch.collate(graphs), torch.cat([g.static for g in graphs]),
                        torch.cat([g.log_samples for g in graphs]))


def _uses_classes(model: Regressor, data: list[Data]) -> bool:
    """Run on node classes (same result, several times faster) where the model allows it."""
    return not model.node_dropout and "u_x" in data[0]


def scaled_forward(model: Regressor, scaler, b, e) -> torch.Tensor:
    static, emb = scaler.static(b.static), scaler.emb(e)
    if isinstance(b, _ClassInputs):
        return model.forward_classes(b.classes, static, emb, b.log_samples)
    return model(b.x, b.edge_index, b.batch, static, emb, b.agg, b.log_samples)


def minibatches(data: list[Data], emb: torch.Tensor | None, idx: np.ndarray, size: int,
             rng: np.random.Generator | None, classes: bool = False) -> list[tuple]:
    """``idx`` in mini-batches of ``size`` graphs (in random order when ``rng`` is given), each
    collated once (as node classes with ``classes``): training reuses them every epoch in a new
    order, since collating anew each epoch made an epoch about 25% slower on CPU."""
    order = rng.permutation(idx) if rng is not None else np.asarray(idx)
    return [(_collate([data[j] for j in part], classes), None if emb is None else emb[part], part)
            for part in (order[i:i + size] for i in range(0, len(order), size))]


def predict_rows(model: Regressor, scaler, data, emb, idx, size: int = 64,
             batches: list | None = None) -> np.ndarray:
    """Predictions for ``idx`` (or for the graphs of ``batches`` of :func:`minibatches`, in order)."""
    model.eval()
    if batches is None:
        batches = minibatches(data, emb, idx, size, None, _uses_classes(model, data))
    out = []
    with torch.no_grad():
        for b, e, _ in batches:
            out.append(scaler.y_inverse(scaled_forward(model, scaler, b, e).double()).squeeze(1).numpy())
    return np.concatenate(out) if out else np.empty(0)


def fit(data: list[Data], y: np.ndarray, emb: torch.Tensor | None, train_idx, val_idx,
        recipe: Recipe, seed: int) -> dict:
    """Train one regressor; keep the state of the epoch with the best validation MAPE.

    Args:
        data: prepared graphs (:func:`prepare`) with features of ``recipe.feature_set``.
        y: ``[G]`` target values (positive, in the target's unit).
        emb: ``[G, d]`` pooled encoder embeddings, or None when ``recipe.embedding == "none"``.
        train_idx, val_idx: example indices to fit on and to select the epoch with.
        recipe: the recipe. seed: seeds initialisation and batch order.

    Returns:
        ``model`` (best state loaded, eval mode), ``scaler``, ``val_mape`` (of the kept epoch),
        ``best_epoch``, ``epochs`` run, ``seconds``, ``history`` (per epoch: mean training loss,
        validation MAPE).
    """
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    train_idx, val_idx = np.asarray(train_idx), np.asarray(val_idx)
    yt = torch.tensor(y, dtype=torch.float32).unsqueeze(1)
    if recipe.scaling == "log":
        static = torch.cat([data[i].static for i in train_idx])
        scaler = Scaler.fit(static, None if emb is None else emb[train_idx], yt[train_idx])
    else:
        scaler = _Published()
    model = build_regressor(data[0], 0 if emb is None else emb.size(1), recipe)
    if recipe.batch_affine:
        log_samples = torch.cat([data[i].log_samples for i in train_idx])
        model.set_target_scale(scaler.y_std, float(log_samples.mean()))
    opt = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    loss_fn = torch.nn.HuberLoss(delta=recipe.huber_delta) if recipe.scaling == "log" else torch.nn.MSELoss()
    history: list[tuple[float, float]] = []
    best, epoch = train_epochs(model, scaler, data, emb, y, train_idx, val_idx, opt, loss_fn,
                               recipe.batch_size, recipe.max_epochs, recipe.patience, rng,
                               history=history, select=recipe.select)
    return {"model": model, "scaler": scaler, "val_mape": history[best[1] - 1][1] if best[1] else best[0],
            "best_epoch": best[1], "epochs": epoch, "seconds": time.perf_counter() - t0,
            "history": history}


def train_epochs(model: Regressor, scaler, data, emb, y: np.ndarray, train_idx, val_idx, opt,
                 loss_fn, batch_size: int, max_epochs: int, patience: int,
                 rng: np.random.Generator, best: tuple = (float("inf"), 0, None),
                 history: list | None = None, select: str = "validation") -> tuple:
    """Epochs of ``opt`` steps until ``patience`` epochs pass without a lower validation MAPE
    (or it turns non-finite); loads the best epoch's state and leaves ``model`` in eval mode.
    With ``select="train_loss"`` every epoch runs and the one of lowest mean training loss is kept.

    Args:
        best: ``(score, epoch, state)`` to beat; fine-tuning passes its starting point.
        history: a list to append ``(mean training loss, validation MAPE)`` of each epoch to.
    Returns:
        ``((score, best_epoch, state), epochs_run)``.
    """
    if select not in ("validation", "train_loss"):
        raise ValueError(f"select must be validation or train_loss, got {select!r}")
    yt = torch.tensor(y, dtype=torch.float32).unsqueeze(1)
    classes = _uses_classes(model, data)
    train = minibatches(data, emb, np.asarray(train_idx), batch_size, rng, classes)
    val = minibatches(data, emb, np.asarray(val_idx), 64, None, classes)
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        model.train()
        total = 0.0
        for k in rng.permutation(len(train)):
            b, e, part = train[k]
            loss = loss_fn(scaled_forward(model, scaler, b, e), scaler.y(yt[part]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss) * len(part)
        val_mape = mape(predict_rows(model, scaler, data, emb, val_idx, batches=val), y[val_idx])
        if history is not None:
            history.append((total / max(len(train_idx), 1), val_mape))
        score = val_mape if select == "validation" else total
        if not np.isfinite(score):
            break
        if score < best[0]:
            best = (score, epoch, {k: v.clone() for k, v in model.state_dict().items()})
        elif select == "validation" and epoch - best[1] >= patience:
            break
    if best[2] is not None:
        model.load_state_dict(best[2])
    model.eval()
    return best, epoch


def fit_task(data_ref, y: np.ndarray, emb_ref, train_idx, val_idx, test_idx, recipe: Recipe,
             seed: int, keep_model: bool = False) -> dict:
    """Body of one Ray task: fit, then predict ``test_idx`` (may be empty).

    ``data_ref``/``emb_ref`` are object-store values shared by every task (Ray resolves refs
    passed at top level); ``data_ref`` holds :func:`pack_graphs` arrays or a list of graphs.
    One intra-op thread per task: Ray runs one task per CPU.
    """
    torch.set_num_threads(1)
    if isinstance(data_ref, dict):
        data_ref = unpack_graphs(data_ref)
    out = fit(data_ref, y, emb_ref, train_idx, val_idx, recipe, seed)
    pred = (predict_rows(out["model"], out["scaler"], data_ref, emb_ref, test_idx)
            if len(test_idx) else np.empty(0))
    result = {k: out[k] for k in ("val_mape", "best_epoch", "epochs", "seconds")}
    result["pred"] = pred
    if keep_model:
        result["state"] = out["model"].state_dict()
        result["scaler"] = out["scaler"]
    return result


def recipe_with(name: str, **overrides) -> Recipe:
    """``RECIPES[name]`` with fields replaced (e.g. smaller epochs in tests)."""
    return replace(RECIPES[name], **{k: v for k, v in overrides.items() if v is not None})


__all__ = ["SEEDS", "Recipe", "RECIPES", "mape", "rmse", "prepare", "pack_graphs", "unpack_graphs",
           "embed", "random_encoder", "fit", "predict_rows", "minibatches", "scaled_forward", "train_epochs", "fit_task", "recipe_with", "for_target", "build_regressor"]
