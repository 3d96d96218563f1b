"""Corpus rows -> PyG graphs, for training on Ray Data.

One parquet row holds one graph (``trappm_ray.graph.rows.graph_to_row``): graph totals plus ragged
per-node lists. Ray Data hands a batch of rows to the train loop as a dict of numpy columns,
where list columns arrive as object arrays of per-row arrays (or as one 2-D array when every row
in the batch has the same length); :class:`GraphCollateFn` turns such a batch into one PyG
``Batch``. Features are computed in the train workers from the raw rows, so one stored corpus
serves every feature set.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from ray.data.collate_fn import NumpyBatchCollateFn
from torch_geometric.data import Batch, Data

from trappm_ray.graph import features
from trappm_ray import storage
from trappm_ray.graph.data import graph_data
from trappm_ray.graph.rows import GRAPH_COLUMNS, GRAPHS_FILE, row_to_graph

def row_to_data(row: Mapping, feature_set: str = "v2",
                label_columns: Sequence[str] = ()) -> Data:
    """One corpus row as a PyG ``Data`` (:func:`~trappm_ray.graph.data.graph_data`), with the
    row's ``label_columns`` stacked into ``y`` when given."""
    return graph_data(row_to_graph(row), feature_set,
                      [row[c] for c in label_columns] if label_columns else None)


def _rows(batch: Mapping[str, np.ndarray]) -> list[dict]:
    n = len(next(iter(batch.values())))
    return [{k: v[i] for k, v in batch.items()} for i in range(n)]


def rows_to_batch(batch: Mapping[str, np.ndarray], feature_set: str = "v2",
                  label_columns: Sequence[str] = ()) -> Batch:
    """A numpy batch of rows (column name -> array of length B) as one PyG ``Batch``."""
    return Batch.from_data_list([row_to_data(r, feature_set, label_columns)
                                 for r in _rows(batch)])


class GraphCollateFn(NumpyBatchCollateFn):
    """``collate_fn`` for ``iter_torch_batches``: numpy rows -> PyG ``Batch`` on CPU.

    Ray runs collate functions in a thread pool, so this keeps no mutable state; moving the batch
    to the device is left to the train loop (Ray only moves plain tensor batches itself).

    Args:
        feature_set: feature set name.
        label_columns: columns to put in ``y``.
    """

    def __init__(self, feature_set: str = "v2", label_columns: Sequence[str] = ()):
        features.get(feature_set)  # fail on the driver, not in every worker
        self.feature_set = feature_set
        self.label_columns = tuple(label_columns)

    def __call__(self, batch: dict[str, np.ndarray]) -> Batch:
        return rows_to_batch(batch, self.feature_set, self.label_columns)


def arrow_filesystem(uri: str):
    """``(pyarrow filesystem or None, path)`` for ``uri``.

    S3 goes through our fsspec filesystem wrapped for pyarrow rather than pyarrow's own S3
    client, which fails to write to radosgw (HTTP 411) unless every process, Ray workers
    included, has the AWS checksum variables set; one client also means one set of endpoint
    and credential settings (``storage.fs_and_path``) for reads, checkpoints and artifacts.
    """
    if not str(uri).startswith("s3://"):
        return None, str(uri)
    import pyarrow.fs as pafs

    fs, path = storage.fs_and_path(uri)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


def graph_files(corpus_uri: str) -> list[str]:
    """Parquet shards under ``corpus_uri/graphs`` (full URIs), sorted; for a label directory,
    its joined graphs ``graphs.parquet`` (the committed graphs every labeled row joins, so an
    encoder can be pretrained from a fresh checkout without building a corpus)."""
    files = storage.listdir(storage.join(corpus_uri, "graphs"), ".parquet")
    if not files and storage.exists(joined := storage.join(corpus_uri, GRAPHS_FILE)):
        files = [joined]
    if not files:
        raise FileNotFoundError(f"no graphs/*.parquet (nor {GRAPHS_FILE}) under {corpus_uri}")
    return files


def _first_files(files: list[str], rows: int) -> list[str]:
    import pyarrow.parquet as pq

    out, seen = [], 0
    for uri in files:
        fs, path = storage.fs_and_path(uri)
        with fs.open(path, "rb") as f:
            seen += pq.ParquetFile(f).metadata.num_rows
        out.append(uri)
        if seen >= rows:
            break
    return out


def read_graphs(corpus_uri: str, label_columns: Sequence[str] = (), max_graphs: int = 0,
                shuffle_files: bool = False, seed: int = 0):
    """The corpus's graph rows as a Ray Dataset (one graph per row, raw columns).

    Args:
        corpus_uri: corpus root, local or ``s3://``.
        label_columns: extra columns to keep (for ``y``).
        max_graphs: keep about the first N rows (0 = all): shards are taken in order until
            their footers count N rows, so that the sample is the same on every run; only the
            rows dropped from the last shard may vary (Ray Data does not preserve order).
        shuffle_files: shuffle the shard order (seeded). Shards are one architecture each, so
            a prefix of a shuffled list spreads a small sample over families.
        seed: seed of the shard shuffle.
    """
    import ray

    files = graph_files(corpus_uri)
    if shuffle_files:
        files = [files[i] for i in np.random.default_rng(seed).permutation(len(files))]
    if max_graphs > 0:
        files = _first_files(files, max_graphs)
    filesystem, _ = arrow_filesystem(corpus_uri)
    if filesystem is not None:
        files = [arrow_filesystem(f)[1] for f in files]
    columns = list(dict.fromkeys(GRAPH_COLUMNS + tuple(label_columns)))
    # select_columns right after the read is pushed down into it: unread columns cost nothing
    ds = ray.data.read_parquet(files, filesystem=filesystem).select_columns(columns)
    return ds.limit(max_graphs) if max_graphs > 0 else ds
