"""A stored network predictor answering in NumPy: the class serving holds for a trained GNN.

It reads a predictor's directory (:mod:`trappm_ray.model.stored`) and evaluates its networks with
:mod:`trappm_ray.model.forward`; the rows it answers with are built by :func:`answer_rows`, which
the PyTorch :class:`~trappm_ray.model.predictor.Predictor` (training, evaluation) shares, so the
two differ in how they run the networks only.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from trappm_ray import devices
from trappm_ray.graph.arrays import GraphArrays, graph_arrays
from trappm_ray.graph.featurize import Graph
from trappm_ray.model import forward, stored
from trappm_ray.model.device_features import KERNELS_COL, static_input
from trappm_ray.model.estimator import PredictorError
from trappm_ray.model.floor_ratio import TARGET_MODES
from trappm_ray.model.intervals import has_group, quantile_offsets
from trappm_ray.model.layout import MOVED_FORMAT, LayoutFactors
from trappm_ray.model.manifest import Manifest
from trappm_ray.model.roofline_inputs import INPUTS, node_arrays
from trappm_ray.physics.kernel_classes import layout_shares
from trappm_ray.physics.units import attends

# (graphs' arrays, targets, the same graphs as the encoder reads them or None) -> per target
# [graphs, seeds] in the network's unit
Networks = Callable[[Sequence[GraphArrays], Sequence[str], Sequence[GraphArrays] | None], dict[str, np.ndarray]]


def answer_rows(manifest: Manifest, networks: Networks, graphs: Sequence[Graph],
                settings_list: Sequence[dict] | None = None, chunk: int = 64) -> list[dict[str, float]]:
    """One dict per graph: ``{target: mean over seeds, target + "_std": their spread}``; for
    ``roofline`` inputs also ``_floor``, ``_kernels`` (the graph's kernel count) and the
    conformal ``_low``/``_high`` (the network predicts the ratio to the roofline floor; no
    answer falls below the floor). Where the manifest has layout factors of a target, a
    channels-last answer is the NCHW one moved (:class:`~trappm_ray.model.layout.LayoutFactors`).

    Args:
        manifest: the predictor's manifest.
        networks: how the networks run (:func:`trappm_ray.model.forward.predict` or PyTorch).
        graphs: featurized graphs at their batch sizes.
        settings_list: per graph the resolved options (``precision``, ``optimizer``,
            ``memory_format``, ``interval_z``); read by ``roofline`` inputs only (None: the
            manifest's defaults).
        chunk: graphs per network call.
    """
    if manifest.net.inputs == INPUTS:
        return _roofline_rows(manifest, networks, graphs, settings_list, chunk)
    rows: list[dict[str, float]] = []
    targets = manifest.targets
    for i in range(0, len(graphs), chunk):
        preds = networks([graph_arrays(g, manifest.feature_set) for g in graphs[i:i + chunk]], targets, None)
        for j in range(len(graphs[i:i + chunk])):
            row = {}
            for target, p in preds.items():
                row[target] = float(p[j].mean())
                row[f"{target}_std"] = float(p[j].std())
            rows.append(row)
    return rows


def _roofline_rows(manifest: Manifest, networks: Networks, graphs, settings_list, chunk: int) -> list[dict[str, float]]:
    spec = devices.get(manifest.device.spec or "")
    default = {k: v[0] for k, v in manifest.options.items()} | {"interval_z": 1.96}
    settings_list = [{**default, **{k: v for k, v in s.items() if v is not None}}
                     for s in (settings_list or [default] * len(graphs))]
    rows: list[dict[str, float]] = [{} for _ in graphs]
    nodes: dict = {}
    # each graph's own (v2) arrays, made once: the base of its roofline inputs in every setting,
    # and what the encoder reads where the networks take its embedding beside those inputs
    own = [graph_arrays(g, "v2") for g in graphs]
    encoded = own if manifest.net.encoder else None
    for target, mode in TARGET_MODES:
        if target not in manifest.targets:
            continue
        run = manifest.net.run[target]
        layout = LayoutFactors.from_dict(manifest.layout[target]) if target in manifest.layout else None
        inputs, floors, kernels, moved = [], [], [], []
        for i, (graph, s) in enumerate(zip(graphs, settings_list)):
            # channels-last from the NCHW answer, where the predictor has layout factors
            moved.append(layout is not None and s.get("memory_format") == MOVED_FORMAT)
            found = static_input(graph, spec, {**s, "memory_format": "nchw"} if moved[-1] else s, mode, run)
            if found is None:
                raise PredictorError(f"{spec.slug} has no roofline at {s['precision']}")
            # one graph's inputs serve every target whose run reads it alike (fused attention
            # matters only where the graph attends)
            torch2 = bool(run["torch2"]) and attends(graph)
            key = (i, s["precision"], torch2, run["compiled"])
            if key not in nodes:
                nodes[key] = node_arrays(graph, spec, s["precision"], torch2, bool(run["compiled"]), own[i])
            inputs.append(nodes[key].with_static(found[1]))
            floors.append(found[0])
            kernels.append(round(math.exp(found[1][KERNELS_COL])))
        ratio = np.concatenate([networks(inputs[i:i + chunk], [target], None if encoded is None else encoded[i:i + chunk])[target]
                                for i in range(0, len(inputs), chunk)])
        ms = np.maximum(ratio, 1.0) * np.asarray(floors)[:, None]  # no step beats the roofline
        for row, p, floor, k, s, graph, move in zip(rows, ms, floors, kernels, settings_list, graphs, moved):
            value = float(p.mean())
            # a moved answer's band: the moved answers' own residuals where calibrated, else the move's band on top
            group = "moved" if move and has_group(manifest.residual_quantiles, target, "moved") else ""
            lo, hi = quantile_offsets(manifest.residual_quantiles, target, float(s.get("interval_z", 1.96)), group)
            row.update({target: value, f"{target}_std": float(p.std()), f"{target}_floor": floor,
                        f"{target}_kernels": k,
                        f"{target}_low": max(value * math.exp(lo), floor),
                        f"{target}_high": value * math.exp(max(hi, 0.0))})
            if move and layout is not None:
                layout.move(row, target, layout_shares(graph, spec, s["precision"]), widen=not group)
                for name in (target, f"{target}_low"):
                    row[name] = max(row[name], floor)
    return rows


class NetworkPredictor:
    """A stored predictor (manifest + weights) answering every target it was trained for.

    Args:
        manifest: the stored manifest (:mod:`trappm_ray.model.stored`).
        weights: its tensors by state-dict name, as NumPy arrays.
    """

    def __init__(self, manifest: Manifest, weights: dict[str, np.ndarray]):
        self.manifest, self.weights = manifest, weights

    @classmethod
    def load(cls, uri: str | Path) -> NetworkPredictor:
        """Read and check the predictor at ``uri`` (PredictorError names what is wrong)."""
        manifest, weights = stored.read(str(uri))
        if manifest.net.head.get("published_head"):
            raise PredictorError(f"{uri}: a published-head regressor is not served (evaluation only)")
        return cls(manifest, weights)

    @property
    def targets(self) -> tuple[str, ...]:
        return self.manifest.targets

    def check(self, setting: dict) -> None:
        """Nothing to refuse beyond the manifest's options, which ``options.resolve`` checks."""

    def networks(self, graphs: Sequence[GraphArrays], targets: Sequence[str],
                 encoder_graphs: Sequence[GraphArrays] | None = None) -> dict[str, np.ndarray]:
        """Per target ``[G, S]`` predictions (graphs x seeds) in the network's unit
        (``encoder_graphs``: :func:`trappm_ray.model.forward.predict`)."""
        return forward.predict(self.manifest, self.weights, graphs, targets, encoder_graphs)

    def predict_graphs(self, graphs: Sequence[Graph], settings_list: Sequence[dict] | None = None,
                       chunk: int = 64) -> list[dict[str, float]]:
        """One row per graph (:func:`answer_rows`)."""
        return answer_rows(self.manifest, self.networks, graphs, settings_list, chunk)


__all__ = ["Networks", "answer_rows", "NetworkPredictor"]
