"""Measured anchors: a reference GPU's own measurement of the graph a user asks about.

A user's model is often one a reference GPU's labels measured (a timm or torchvision network):
then the measurement itself says how far above its roofline floor the graph runs there, with no
regressor error. Reference transfer (:mod:`trappm_ray.model.floor_ratio`) moves that measured / floor
ratio, at the labeled batch nearest the request, to the asked GPU. The RTX 4090 given as an unseen
GPU: its 2,841 eager inference rows 13.4% MAPE from the RTX 3090 with these anchors, 19.1% from the
RTX 3090 predictor's answers alone (``experiments/unseen_gpu.py``, ``docs/devices.md``).

A graph is recognized by :func:`fingerprint`: its operators, edges and per-node parameter counts,
which the batch size and the input resolution leave unchanged; the resolution is part of the key.
Checkpoint variants of one architecture (``convnext_tiny`` and ``convnext_tiny_in22ft1k``) share a
fingerprint, as they share their graph. A file exported differently (another exporter or opset)
does not match and gets the predictor's answer.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from trappm_ray import storage
from trappm_ray.graph.rows import row_to_graph
from trappm_ray.model.device_features import SETTING_COLS

ANCHOR_FILE = "anchors.parquet"  # next to a predictor's manifest.json
MAX_BATCH_RATIO = 2.0  # a measurement at a batch further from the request says less than the predictor
COLUMNS = ("fingerprint", "resolution", "batch_size", "target", "precision", "memory_format", "optimizer",
           "measured_ms", "ratio", "arch")


def fingerprint(graph) -> str:
    """16 hex digits identifying a featurized graph's structure, the same at every batch size and
    resolution (operators, edges, per-node parameter counts)."""
    h = hashlib.sha256("\0".join(graph.ops).encode())
    h.update(np.ascontiguousarray(graph.edge_index, np.int64).tobytes())
    h.update(np.ascontiguousarray(graph.params, np.float64).tobytes())
    return h.hexdigest()[:16]


def nearest_batch(batches, batch: int) -> int | None:
    """Of the labeled ``batches``, the one nearest ``batch`` in ratio (the smaller on a tie),
    None when none lies within :data:`MAX_BATCH_RATIO`."""
    best = min(batches, key=lambda b: (abs(math.log(b / batch)), b), default=None)
    return best if best is not None and abs(math.log(best / batch)) <= math.log(MAX_BATCH_RATIO) + 1e-9 else None


class MeasuredAnchors:
    """The measured label rows of one device by graph fingerprint.

    Args:
        rows: dicts with :data:`COLUMNS`: ``ratio`` = measured / the graph's roofline floor on the
            device in that row's setting; ``optimizer`` is ``none`` for inference rows.
        device: the label device folder they come from (named in answers).
    """

    def __init__(self, rows: list[dict], device: str):
        self.device = device
        self.by_key: dict[tuple, dict[int, dict]] = {}
        for r in rows:
            key = (r["fingerprint"], r["resolution"], r["target"], r["precision"], r["memory_format"], r["optimizer"])
            self.by_key.setdefault(key, {})[int(r["batch_size"])] = r

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_key.values())

    def lookup(self, graph, target: str, setting: dict) -> dict | None:
        """The measured row of ``graph`` (same fingerprint and resolution) for ``target`` in
        ``setting`` (``precision``, ``memory_format``, ``optimizer`` for a training step) at the
        labeled batch nearest the graph's, or None."""
        optimizer = setting.get("optimizer") if target == "train_step_ms" else "none"
        key = (fingerprint(graph), int(graph.static["resolution"]), target, setting.get("precision"),
               setting.get("memory_format") or "nchw", optimizer)
        found = self.by_key.get(key)
        b = nearest_batch(found, int(graph.static["batch_size"])) if found else None
        return None if b is None else found[b]

    def save(self, uri: str) -> str:
        """Write the rows as ``<uri>/anchors.parquet`` (a predictor's directory, local or ``s3://``)."""
        rows = [r for by_batch in self.by_key.values() for r in by_batch.values()]
        table = pa.table({c: [r[c] for r in rows] for c in COLUMNS})
        path = storage.join(str(uri), ANCHOR_FILE)
        storage.write_table(table.replace_schema_metadata({"device": self.device}), path)
        return path

    @classmethod
    def load(cls, uri: str | Path) -> MeasuredAnchors | None:
        """The anchors stored in a predictor's directory, None where it has none."""
        path = storage.join(str(uri), ANCHOR_FILE)
        if not storage.exists(path):
            return None
        table = storage.read_table(path)
        return cls(table.to_pylist(), (table.schema.metadata or {}).get(b"device", b"").decode())


def from_examples(ex: list[dict], index: dict, device: str, run: dict[str, dict]) -> MeasuredAnchors:
    """The rows of ``ex`` (:func:`trappm_ray.train.gpu_examples.examples` of one device) measured
    in the framework setting its predictor answers in, as anchors.

    Args:
        index: their graph rows by (arch, resolution, batch size).
        run: per target the predictor's ``torch2`` and ``compiled`` flags (its manifest's ``run``).
            A measurement in another setting moves badly: RTX 3090 inference times moved to the
            RTX 4090's eager rows by the floor ratio miss by 40.8% MAPE where the RTX 3090 row was
            PyTorch 1 only (78 keys), 15.4% where its time averages PyTorch 1 and 2, 8.8% where
            PyTorch 2 only (200 keys each; ``experiments/floor_ratio.py --any-torch --pairs 200``).
    """
    prints: dict[tuple, str] = {}
    rows = []
    for e in ex:
        arch, res, bs, _, precision, mode, optimizer, torch2, compiled = e["rkey"]
        want = run.get(e["target"])
        if want is None or (bool(torch2), bool(compiled)) != (bool(want["torch2"]), bool(want["compiled"])):
            continue
        if (arch, res, bs) not in prints:
            prints[(arch, res, bs)] = fingerprint(row_to_graph(index[(arch, res, bs)]))
        rows.append({"fingerprint": prints[(arch, res, bs)], "resolution": int(res), "batch_size": int(bs),
                     "target": e["target"], "precision": precision,
                     "memory_format": "nhwc" if e["setting"][SETTING_COLS.index("nhwc")] else "nchw",
                     "optimizer": optimizer if mode == "train" else "none",
                     "measured_ms": float(e["measured"]), "ratio": float(e["measured"] / e["floor"]), "arch": arch})
    return MeasuredAnchors(rows, device)


__all__ = ["ANCHOR_FILE", "MAX_BATCH_RATIO", "COLUMNS", "fingerprint", "nearest_batch", "MeasuredAnchors",
           "from_examples"]
