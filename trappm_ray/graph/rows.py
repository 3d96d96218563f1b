"""The graph row format: one :class:`~trappm_ray.graph.featurize.Graph` as one parquet row.

Corpus shards, the joined label graphs and the sample set all store graphs this way: keys and
graph totals as scalars, per-node quantities as ragged lists (``node_<name>``), edges as two
lists. Any feature set is computed from such a row later, so one stored corpus serves them all.
"""
from __future__ import annotations

import numpy as np

from trappm_ray.graph.featurize import Graph

GRAPH_VERSION = 1  # bump when the raw per-node quantities change meaning
NODE_COLUMNS = ("macs", "params", "weight_bytes", "out_bytes", "in_elems", "out_elems",
                "n_in", "n_out")
STATIC_COLUMNS = ("batch_size", "resolution", "nodes", "edges", "macs", "params", "weight_bytes",
                  "activation_bytes", "train_memory_estimate_bytes")
# What row_to_graph needs; reading only these keeps strings like `exporter` out of every batch.
GRAPH_COLUMNS = STATIC_COLUMNS + ("ops", "edge_src", "edge_dst") + tuple(
    f"node_{c}" for c in NODE_COLUMNS + ("in_shape", "out_shape", "attrs"))
# A folder's graphs in one file: a label store's joined graphs (``data/labels/graphs.parquet``),
# read as a corpus too.
GRAPHS_FILE = "graphs.parquet"


def graph_to_row(graph: Graph, **keys) -> dict:
    """One parquet row: ``keys`` (e.g. arch, family, exporter), graph totals, per-node arrays."""
    row = dict(keys, graph_version=GRAPH_VERSION, **graph.static)
    row["ops"] = graph.ops
    row["edge_src"] = graph.edge_index[0].tolist()
    row["edge_dst"] = graph.edge_index[1].tolist()
    for name in NODE_COLUMNS:
        row[f"node_{name}"] = getattr(graph, name).tolist()
    row["node_in_shape"] = graph.in_shape.ravel().tolist()
    row["node_out_shape"] = graph.out_shape.ravel().tolist()
    row["node_attrs"] = graph.attrs.ravel().tolist()
    return row


def row_to_graph(row) -> Graph:
    """Inverse of :func:`graph_to_row` (``row``: a dict or one row of a numpy batch)."""
    n = len(row["ops"])
    arrays = {name: np.asarray(row[f"node_{name}"], np.float64) for name in NODE_COLUMNS}
    return Graph(
        ops=list(row["ops"]),
        edge_index=np.array([row["edge_src"], row["edge_dst"]], np.int32).reshape(2, -1),
        macs=arrays["macs"], params=arrays["params"], weight_bytes=arrays["weight_bytes"],
        out_bytes=arrays["out_bytes"], in_elems=arrays["in_elems"], out_elems=arrays["out_elems"],
        n_in=arrays["n_in"].astype(np.int32), n_out=arrays["n_out"].astype(np.int32),
        in_shape=np.asarray(row["node_in_shape"], np.int64).reshape(n, 6),
        out_shape=np.asarray(row["node_out_shape"], np.int64).reshape(n, 6),
        attrs=np.asarray(row["node_attrs"], np.int64).reshape(n, 3),
        static={k: row[k] for k in STATIC_COLUMNS},
        meta={k: row[k] for k in ("arch", "family") if k in row},
    )
