"""A trained predictor in PyTorch: frozen encoder + per-target, per-seed regressors.

Training builds one, registers it (:mod:`trappm_ray.model.stored`: ``manifest.json`` +
``weights.npz``) and evaluates it; serving reads the same directory into a
:class:`~trappm_ray.model.network_predictor.NetworkPredictor`, which runs the networks in NumPy.
Both answer through :func:`~trappm_ray.model.network_predictor.answer_rows`: the mean over the
seed ensemble, the seeds' spread beside it.
"""
from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from trappm_ray.graph import features
from trappm_ray.graph.arrays import GraphArrays
from trappm_ray.graph.data import to_data
from trappm_ray.graph.featurize import Graph
from trappm_ray.model import stored
from trappm_ray.model.estimator import DEFAULT_DIR, PredictorError
from trappm_ray.model.manifest import Manifest
from trappm_ray.model.network_predictor import answer_rows
from trappm_ray.model.networks import GraphEncoder, Regressor, neighbor_mean, pooled_embedding
from trappm_ray.model.roofline_inputs import INPUTS, NODE_DIM, STATIC_DIM
from trappm_ray.model.static_mlp import StaticMLP


@dataclass
class Scaler:
    """Affine maps to and from the networks' scale, fitted on training data only.

    Static features (already log-scaled by the v2 feature set) and the pooled embedding
    (signed-log, since sums over thousands of nodes span decades) are z-scored per column;
    the target is z-scored in log space, so that a squared or absolute error is a relative one.
    """

    static_mean: torch.Tensor
    static_std: torch.Tensor
    emb_mean: torch.Tensor
    emb_std: torch.Tensor
    y_mean: float
    y_std: float

    @staticmethod
    def signed_log(t: torch.Tensor) -> torch.Tensor:
        return torch.sign(t) * torch.log1p(t.abs())

    @classmethod
    def fit(cls, static: torch.Tensor, emb: torch.Tensor | None, y: torch.Tensor) -> Scaler:
        # a column constant on the training rows (one device's spec vector) gets unit scale, so
        # another value at prediction time moves the input by its difference, not by 1e6 x it
        std = lambda t: (torch.where(t.std(0) > 1e-6, t.std(0), torch.ones(()))  # noqa: E731
                         if len(t) > 1 and t.shape[1] else torch.ones(t.shape[1:]))
        emb = torch.zeros(len(static), 0) if emb is None else cls.signed_log(emb)
        ly = torch.log(y.clamp_min(1e-9))
        return cls(static.mean(0), std(static), emb.mean(0), std(emb),
                   float(ly.mean()), float(ly.std()) if len(ly) > 1 else 1.0)

    def static(self, s: torch.Tensor) -> torch.Tensor:
        return (s - self.static_mean) / self.static_std

    def emb(self, e: torch.Tensor | None) -> torch.Tensor | None:
        if e is None or self.emb_mean.numel() == 0:
            return None
        return (self.signed_log(e) - self.emb_mean) / self.emb_std

    def y(self, y: torch.Tensor) -> torch.Tensor:
        return (torch.log(y.clamp_min(1e-9)) - self.y_mean) / self.y_std

    def y_inverse(self, z: torch.Tensor) -> torch.Tensor:
        return torch.exp(z * self.y_std + self.y_mean)

    def to(self, device: torch.device | str) -> Scaler:
        for name in ("static_mean", "static_std", "emb_mean", "emb_std"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def state(self) -> dict[str, torch.Tensor]:
        return {"static_mean": self.static_mean, "static_std": self.static_std,
                "emb_mean": self.emb_mean, "emb_std": self.emb_std,
                "y": torch.tensor([self.y_mean, self.y_std], dtype=torch.float64)}

    @classmethod
    def from_state(cls, d: dict[str, torch.Tensor]) -> Scaler:
        return cls(d["static_mean"], d["static_std"], d["emb_mean"], d["emb_std"],
                   float(d["y"][0]), float(d["y"][1]))


def code_version() -> str:
    """The package's git commit (with ``+dirty``), or ``unknown`` outside a checkout."""
    root = Path(__file__).parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "trappm_ray"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class Predictor:
    """Predicts every target it was trained for, for any featurized graph.

    Args:
        manifest: the registry manifest (:class:`~trappm_ray.model.manifest.Manifest` with a
            network part). ``roofline`` inputs (a GPU predictor, :mod:`trappm_ray.model.roofline_inputs`)
            also need ``device.spec``, ``options``, ``run`` and ``residual_quantiles``.
        encoder: the frozen pretrained encoder, or None for a predictor without embedding.
        heads: target -> one :class:`Regressor` per seed.
        scalers: target -> one :class:`Scaler` per seed (each fitted on that seed's rows).
        mlps: target -> one :class:`~trappm_ray.model.static_mlp.StaticMLP` per seed, blended with
            that seed's network by the GNN's share ``manifest.net.blend["weights"][target]``.
    """

    def __init__(self, manifest: Manifest, encoder: GraphEncoder | None,
                 heads: dict[str, list[Regressor]], scalers: dict[str, list[Scaler]],
                 mlps: dict[str, list[StaticMLP]] | None = None):
        self.manifest, self.encoder, self.heads, self.scalers, self.mlps = manifest, encoder, heads, scalers, mlps or {}
        self.compute = torch.device("cpu")
        for model in self._networks():
            model.eval()

    def _networks(self) -> list[torch.nn.Module]:
        return ([self.encoder] if self.encoder is not None else []) + [
            h for hs in (*self.heads.values(), *self.mlps.values()) for h in hs]

    def to(self, device: torch.device | str) -> Predictor:
        """Run predictions on ``device`` (e.g. ``cuda`` in a GPU batch actor); returns self."""
        self.compute = torch.device(device)
        for model in self._networks():
            model.to(self.compute)
        for scalers in self.scalers.values():
            for sc in scalers:
                sc.to(self.compute)
        return self

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.heads)

    def check(self, setting: dict) -> None:
        """Nothing to refuse beyond the manifest's options, which ``options.resolve`` checks."""

    @property
    def feature_set(self) -> str:
        return self.manifest.feature_set

    @torch.no_grad()
    def predict_data(self, data: Sequence[Data], emb: torch.Tensor | None = None,
                     targets: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Per target (default: all): ``[G, S]`` predictions (graphs x seeds) in the network's
        unit (the target's, or the ratio to the roofline floor for ``roofline`` inputs)."""
        batch = Batch.from_data_list(list(data)).to(self.compute)
        emb = None if emb is None else emb.to(self.compute)
        if emb is None and self.encoder is not None:
            emb = pooled_embedding(self.encoder, batch.x, batch.edge_index, batch.batch,
                                   batch.num_graphs)
        agg = neighbor_mean(batch.x, batch.edge_index)
        out = {}
        for target in targets or self.heads:
            heads = self.heads[target]
            cols = [sc.y_inverse(h(batch.x, batch.edge_index, batch.batch, sc.static(batch.static),
                                   sc.emb(emb), agg, batch.log_samples).double())
                    for h, sc in zip(heads, self.scalers[target])]
            w = (self.manifest.net.blend or {})["weights"][target] if target in self.mlps else 1.0
            if w < 1:  # log(ratio) = w log(network) + (1 - w) log(MLP), per seed
                cols = [torch.exp(w * torch.log(c.clamp_min(1e-6)) + (1 - w) * m(batch.static).unsqueeze(1))
                        for c, m in zip(cols, self.mlps[target])]
            out[target] = torch.cat(cols, 1).cpu().numpy()
        return out

    def predict_arrays(self, graphs: Sequence[GraphArrays], targets: Sequence[str],
                       encoder_graphs: Sequence[GraphArrays] | None = None) -> dict[str, np.ndarray]:
        """:meth:`predict_data` on graphs' arrays (:mod:`trappm_ray.graph.arrays`); the encoder
        reads ``encoder_graphs`` where given (the networks' own inputs are other features)."""
        emb = None
        if encoder_graphs is not None and self.encoder is not None:
            b = Batch.from_data_list([to_data(g) for g in encoder_graphs]).to(self.compute)
            with torch.no_grad():
                emb = pooled_embedding(self.encoder, b.x, b.edge_index, b.batch, b.num_graphs)
        return self.predict_data([to_data(g) for g in graphs], emb, targets=targets)

    def predict_graphs(self, graphs: Sequence[Graph], settings_list: Sequence[dict] | None = None,
                       chunk: int = 64) -> list[dict[str, float]]:
        """One row per graph (:func:`~trappm_ray.model.network_predictor.answer_rows`)."""
        return answer_rows(self.manifest, self.predict_arrays, graphs, settings_list, chunk)

    # -- registry -----------------------------------------------------------------------------
    def state(self) -> dict[str, torch.Tensor]:
        flat = {}
        if self.encoder is not None:
            flat.update({f"encoder.{k}": v for k, v in self.encoder.state_dict().items()})
        for target, heads in self.heads.items():
            for seed, head, sc in zip(self.manifest.net.seeds, heads, self.scalers[target]):
                flat.update({f"head.{target}.{seed}.{k}": v for k, v in head.state_dict().items()})
                flat.update({f"scaler.{target}.{seed}.{k}": v for k, v in sc.state().items()})
        for target, mlps in self.mlps.items():
            for seed, mlp in zip(self.manifest.net.seeds, mlps):
                flat.update({f"mlp.{target}.{seed}.{k}": v for k, v in mlp.state_dict().items()})
        return flat

    def save(self, uri: str) -> str:
        """Store the predictor at ``uri`` (:func:`trappm_ray.model.stored.write`)."""
        self.manifest = stored.write(uri, self.manifest, {k: v.detach().cpu().numpy() for k, v in self.state().items()})
        return uri

    @classmethod
    def load(cls, uri: str | Path) -> Predictor:
        """Read and check a stored predictor (:func:`trappm_ray.model.stored.read`; no code runs)."""
        manifest, arrays = stored.read(str(uri))
        try:
            return cls._from_state(manifest, features.get(manifest.feature_set),
                                   {k: torch.from_numpy(v) for k, v in arrays.items()})
        except (KeyError, RuntimeError) as e:  # missing or misshapen tensors: a broken save
            raise PredictorError(f"{uri}: weights do not fit the manifest: {e}"[:400]) from e

    @classmethod
    def _from_state(cls, manifest: Manifest, fs, flat: dict) -> Predictor:
        part = lambda prefix: {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)}  # noqa: E731
        net, encoder = manifest.net, None
        if net.encoder:
            encoder = GraphEncoder(fs.node_dim, net.encoder["dims"], net.encoder.get("dropout", 0.0))
            encoder.load_state_dict(part("encoder."))
        emb_dim = encoder.out_dim if encoder is not None else 0
        spec = net.head
        roof = net.inputs == INPUTS
        node_dim, static_dim = (NODE_DIM, STATIC_DIM) if roof else (fs.node_dim, fs.static_dim)
        node_dropout = spec.get("node_dropout", False)
        heads, scalers = {}, {}
        for target in manifest.targets:
            heads[target], scalers[target] = [], []
            for seed in net.seeds:
                head = Regressor(node_dim, static_dim, emb_dim, spec["hidden"], spec["fc"],
                                 spec["dropout"], node_dropout=node_dropout,
                                 batch_affine=target in spec.get("batch_affine", ()))
                head.load_state_dict(part(f"head.{target}.{seed}."))
                heads[target].append(head)
                scalers[target].append(Scaler.from_state(part(f"scaler.{target}.{seed}.")))
        blend = net.blend or {}
        mlps = {t: [StaticMLP(static_dim, blend["hidden"]) for _ in net.seeds] for t in blend.get("weights", {})}
        for target, models in mlps.items():
            for seed, mlp in zip(net.seeds, models):
                mlp.load_state_dict(part(f"mlp.{target}.{seed}."))
        return cls(manifest, encoder, heads, scalers, mlps)


def register(predictor: Predictor, root: str, name: str) -> str:
    """Save ``predictor`` as the next version under ``<root>/<name>/``; its URI."""
    uri, fields = stored.next_version(root, name)
    predictor.manifest = predictor.manifest.replace(**fields)
    return predictor.save(uri)


def load_default() -> Predictor:
    """The predictor shipped inside the package (trained on this project's committed labels)."""
    if not (DEFAULT_DIR / "manifest.json").exists():
        raise PredictorError(f"no default predictor shipped at {DEFAULT_DIR}")
    return Predictor.load(DEFAULT_DIR)


__all__ = ["DEFAULT_DIR", "PredictorError", "Scaler", "Predictor", "code_version", "register", "load_default"]
