"""Corpus rows -> PyG Data -> Batch, directly and through Ray Data (local and S3)."""
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from trappm_ray.graph import features
from trappm_ray import storage
from trappm_ray.corpus.loader import (GRAPH_COLUMNS, GraphCollateFn, graph_files, read_graphs,
                                   row_to_data, rows_to_batch)

@pytest.fixture(scope="module")
def corpus(tiny_corpus):
    return tiny_corpus


def _rows(corpus):
    return [r for f in graph_files(corpus) for r in pq.read_table(f).to_pylist()]


def _as_ray_numpy(rows, ragged=True):
    """A batch as Ray Data gives it: list columns as object arrays of per-row arrays."""
    out = {}
    for c in GRAPH_COLUMNS:
        vals = [np.asarray(r[c]) for r in rows]
        if vals[0].ndim == 0:
            out[c] = np.array(vals)
        elif ragged:
            out[c] = np.empty(len(vals), object)
            out[c][:] = vals
        else:  # every row the same length: Ray stacks them into one 2-D array
            out[c] = np.stack(vals)
    return out


@pytest.mark.parametrize("name", ["v2", "trappm-v1"])
def test_row_to_data(corpus, name):
    fs = features.get(name)
    for row in _rows(corpus):
        d = row_to_data(row, name, label_columns=("params", "batch_size"))
        n = row["nodes"]
        assert d.num_nodes == n and d.x.shape == (n, fs.node_dim) and d.x.dtype == torch.float32
        e = row["edges"] * (2 if fs.bidirectional else 1)
        assert d.edge_index.shape == (2, e) and d.edge_index.dtype == torch.int64
        assert int(d.edge_index.max()) < n and torch.isfinite(d.x).all()
        assert d.static.shape == (1, fs.static_dim)
        assert d.y.tolist() == [[float(row["params"]), float(row["batch_size"])]]
    assert "y" not in row_to_data(row, name)


def test_rows_to_batch_matches_rows(corpus):
    rows = _rows(corpus)
    batch = rows_to_batch(_as_ray_numpy(rows))
    singles = [row_to_data(r) for r in rows]
    assert batch.num_graphs == len(rows) == 4
    assert batch.static.shape == (4, features.V2.static_dim)
    assert torch.equal(batch.x, torch.cat([d.x for d in singles]))
    assert torch.equal(batch.ptr, torch.tensor(np.cumsum([0] + [r["nodes"] for r in rows])))
    # edges are offset per graph: no edge crosses two graphs
    assert (batch.batch[batch.edge_index[0]] == batch.batch[batch.edge_index[1]]).all()


def test_collate_same_length_rows(corpus):
    same = [r for r in _rows(corpus) if r["arch"] == "test_resnet"]  # b1 and b2: same graph size
    batch = GraphCollateFn("trappm-v1", label_columns=("batch_size",))(
        _as_ray_numpy(same, ragged=False))
    assert batch.num_graphs == 2 and batch.y.view(-1).tolist() == [1.0, 2.0]
    assert batch.x.shape[1] == 113
    with pytest.raises(ValueError):
        GraphCollateFn("v9")


def test_graph_files_missing(tmp_path):
    with pytest.raises(FileNotFoundError):
        graph_files(str(tmp_path))


def _through_ray(corpus_uri):
    ds = read_graphs(corpus_uri)
    assert ds.count() == 4
    batches = list(ds.iter_torch_batches(batch_size=3, collate_fn=GraphCollateFn("v2")))
    assert [b.num_graphs for b in batches] == [3, 1]
    nodes = sorted(r["nodes"] for r in _rows(corpus_uri))
    got = sorted(int(n) for b in batches for n in (b.ptr[1:] - b.ptr[:-1]))
    assert got == nodes
    assert read_graphs(corpus_uri, max_graphs=1).count() == 1


def test_read_graphs_local(ray_session, corpus):
    _through_ray(corpus)


@pytest.mark.s3
def test_read_graphs_s3(ray_session, corpus, s3_prefix):
    for f in graph_files(corpus):
        storage.write_bytes(storage.join(s3_prefix, "graphs", f.rsplit("/", 1)[1]),
                            storage.read_bytes(f))
    _through_ray(s3_prefix)


def test_graph_files_of_a_label_directory_are_its_joined_graphs(tmp_path):
    (tmp_path / "graphs.parquet").write_bytes(b"")  # a label directory: labels + joined graphs
    assert graph_files(str(tmp_path)) == [str(tmp_path / "graphs.parquet")]
