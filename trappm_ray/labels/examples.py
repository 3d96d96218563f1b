"""Labeled examples: measured label rows joined to the graph of the same model and input.

Label rows and graphs share the key (arch, resolution, batch size). The graphs of every labeled
key are copied from the corpus into one compact file, ``<labels>/graphs.parquet``, that is
committed beside the labels, so that regressors train from a clean checkout without rebuilding
the corpus; every row there came from the corpus built by ``jobs/build_dataset.py`` and keeps its
``exporter`` and ``graph_version``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from torch_geometric.data import Data

from trappm_ray import storage
from trappm_ray.corpus.build import task_name
from trappm_ray.graph.data import graph_data
from trappm_ray.graph.rows import GRAPH_COLUMNS, GRAPHS_FILE, row_to_graph
from trappm_ray.labels.store import device_slugs, ok_labels
from trappm_ray.targets import TARGETS, label_column

log = logging.getLogger(__name__)

GRAPH_KEY = ("arch", "resolution", "batch_size")  # a label row joins the graph of this key
# A graph holds every parameter of the model measured, and more where the export keeps buffers as
# initializers (relative-position tables, weight-standardized copies: up to 4.7x); one with fewer
# than this share of the row's stated parameters is another model exported under the row's name
# (timm maps ``ig_resnext101_32x48d``, 828 M parameters, to ``resnext101_32x8d``, 89 M).
LEAST_PARAMS_SHARE = 0.9


def same_model(row: dict, graph: dict) -> bool:
    """Whether ``graph`` (a graph row) can be the model label ``row`` measured: False where the
    row states its parameter count and the graph holds fewer than :data:`LEAST_PARAMS_SHARE` of it."""
    stated, held = row.get("params"), graph.get("params")
    return not stated or held is None or held >= LEAST_PARAMS_SHARE * stated


def join_graphs(labels_dir: str, corpus: str) -> dict:
    """Write ``<labels_dir>/graphs.parquet``: the corpus graph of every labeled key, any device.

    Returns:
        Counts: labeled keys, keys joined, the keys with no graph and those whose graph is another
        model (:func:`same_model`; listed).
    """
    keys, stated = set(), {}
    for slug in device_slugs(labels_dir):
        for r in ok_labels(labels_dir, slug).to_pylist():
            key = tuple(r[k] for k in GRAPH_KEY)
            keys.add(key)
            stated[key] = max(stated.get(key) or 0, r.get("params") or 0)
    tables, missing, other = [], [], []
    columns = ["arch", "family", "exporter", "graph_version", *GRAPH_COLUMNS]
    for arch, res in sorted({(a, r) for a, r, _ in keys}):
        uri = storage.join(corpus, "graphs", f"{task_name(arch, res)}.parquet")
        wanted = sorted(b for a, r, b in keys if (a, r) == (arch, res))
        if not storage.exists(uri):
            missing += [(arch, res, b) for b in wanted]
            continue
        t = storage.read_table(uri, columns=list(dict.fromkeys(columns)))
        t = t.filter(pc.is_in(t.column("batch_size"), pa.array(wanted, t.column("batch_size").type)))
        missing += [(arch, res, b) for b in sorted(set(wanted) - set(t.column("batch_size").to_pylist()))]
        kept = [same_model({"params": stated[(arch, res, b)]}, {"params": p})
                for b, p in zip(t.column("batch_size").to_pylist(), t.column("params").to_pylist())]
        other += [(arch, res, b) for b, ok in zip(t.column("batch_size").to_pylist(), kept) if not ok]
        tables.append(t.filter(pa.array(kept, pa.bool_())))
    joined = pa.concat_tables(tables, promote_options="permissive") if tables else None
    if joined is not None:
        storage.write_table(joined, storage.join(labels_dir, GRAPHS_FILE))
    return {"labeled_keys": len(keys), "joined": 0 if joined is None else joined.num_rows,
            "missing": missing, "another_model": other}


@dataclass
class Examples:
    """Labeled graphs of one device, ready for training.

    Attributes:
        rows: one dict per example: key, family, and one value per target (NaN when unmeasured).
        data: one PyG ``Data`` per example (``x``, ``edge_index``, ``static [1, d]``).
        feature_set: the feature set ``data`` was built with.
    """

    rows: list[dict]
    data: list[Data]
    feature_set: str

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> np.ndarray:
        return np.array([r[name] for r in self.rows])


def count_joined(labels_dir: str, rows: list[dict]) -> int:
    """How many of ``rows`` have a graph in ``<labels_dir>/graphs.parquet``."""
    uri = storage.join(labels_dir, GRAPHS_FILE)
    if not storage.exists(uri):
        return 0
    g = storage.read_table(uri, columns=list(GRAPH_KEY))
    keys = set(zip(*(g.column(k).to_pylist() for k in GRAPH_KEY)))
    return sum(tuple(r[k] for k in GRAPH_KEY) in keys for r in rows)


def load_examples(labels_dir: str, slug: str, feature_set: str = "v2",
                  targets: tuple[str, ...] = tuple(TARGETS), select: dict | None = None,
                  skip_unjoined: bool = False) -> Examples:
    """Every ok label row of ``slug`` that has a graph, featurized with ``feature_set``.

    Args:
        labels_dir, slug: the label store and device.
        feature_set: ``v2`` or ``trappm-v1``.
        targets: target columns of each example (NaN where a row does not measure it).
        select: keep only rows whose columns equal these values (e.g. ``{"memory_format":
            "nchw"}``): one measurement per graph when a device's labels vary a setting.
        skip_unjoined: leave out rows without a graph (logged) instead of failing.

    Raises:
        ValueError: a label row has no graph in ``graphs.parquet`` (re-run :func:`join_graphs`),
            or two rows share a graph (the labels vary a setting ``select`` must fix).
    """
    labels = [r for r in ok_labels(labels_dir, slug).to_pylist()
              if all(r.get(k) == v for k, v in (select or {}).items())]
    key = lambda r: tuple(r[k] for k in GRAPH_KEY)  # noqa: E731
    table = storage.read_table(storage.join(labels_dir, GRAPHS_FILE))
    table = table.filter(pc.is_in(table.column("arch"), pa.array(sorted({r["arch"] for r in labels}),
                                                                  table.column("arch").type)))
    by_key = {key(g): g for g in table.to_pylist()}
    labels = [r for r in labels if key(r) not in by_key or same_model(r, by_key[key(r)])]
    missing = [key(r) for r in labels if key(r) not in by_key]
    if missing and not skip_unjoined:
        raise ValueError(f"{len(missing)} label rows have no graph, e.g. {missing[:3]}: "
                         f"run jobs/train_regressors.py --join-corpus <corpus>")
    if missing:
        log.warning("%s: %d of %d label rows have no graph and are left out", slug, len(missing),
                    len(labels))
        labels = [r for r in labels if key(r) in by_key]
    seen: dict = {}
    for r in labels:
        if seen.setdefault(key(r), r) is not r:
            varied = sorted(c for c in ("precision", "memory_format", "compiled", "gpus",
                                        "parallelism", "optimizer") if r.get(c) != seen[key(r)].get(c))
            raise ValueError(f"{slug}: rows {key(r)} share a graph but differ in {varied}: "
                             f"select one value of each")
    rows, data = [], []
    for r in sorted(labels, key=key):
        row = {k: r[k] for k in GRAPH_KEY} | {"family": r["family"]}
        for target in targets:
            value = r.get(label_column(target, r["device"]))
            row[target] = float(value) if value is not None else float("nan")
        rows.append(row)
        data.append(graph_data(row_to_graph(by_key[key(r)]), feature_set))
    return Examples(rows, data, feature_set)


__all__ = ["GRAPH_KEY", "LEAST_PARAMS_SHARE", "same_model", "join_graphs", "count_joined", "Examples",
           "load_examples"]
