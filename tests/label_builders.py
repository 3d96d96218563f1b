"""A tiny labeled dataset on disk (label rows + joined graphs) for regression tests.

Six hand-built "architectures" in three families: the tiny CNN at three input sizes, the
transformer block at three sequence lengths, and a stacked-CNN family, each at batch sizes
1..32. Label values are a known smooth function of the graph's MACs and batch size (with 2%
deterministic noise), so a regressor that works gets a small error on them.
"""
import numpy as np
import pyarrow as pa

from tests.onnx_builders import cnn_model, transformer_block
from trappm_ray import storage
from trappm_ray.graph.rows import graph_to_row
from trappm_ray.graph.featurize import featurize
from trappm_ray.labels.store import SCHEMA
from trappm_ray.graph.rows import GRAPHS_FILE

SLUG = "test-cpu-t1"
BATCHES = (1, 2, 4, 8, 16, 32)


def _archs():
    for hw in (8, 12, 16):
        yield f"cnn{hw}", "cnn", hw, lambda hw=hw: cnn_model(hw=hw)
    for seq in (8, 16, 24):
        yield f"tf{seq}", "transformer", seq, lambda seq=seq: transformer_block(seq=seq)
    for hw in (10, 14, 20):
        yield f"wide{hw}", "wide", hw, lambda hw=hw: cnn_model(hw=hw, conv_bias=False)


def make_labeled_dir(root: str, slug: str = SLUG, scale: float = 1.0, device: str = "cpu",
                     extra: dict | None = None) -> str:
    """Write ``<root>/<slug>/labels.parquet`` and ``<root>/graphs.parquet``; returns root.

    ``scale`` multiplies the time labels and adds to memory, a second "device" for transfer.
    ``device="cuda"`` fills the columns a GPU harness fills (CUDA allocator peaks, NVML memory
    and power) and leaves the CPU's resident-set columns empty. ``extra``: columns set on every
    row (an imported GPU set's ``device_spec``, ``precision``, ...)."""
    rng = np.random.default_rng(0)
    labels, graphs = [], []
    for arch, family, res, build in _archs():
        model = build()
        for b in BATCHES:
            g = featurize(model, batch_size=b)
            row = graph_to_row(g, arch=arch, family=family, exporter="tests/onnx_builders")
            row["resolution"] = res  # the key; the transformer's graph has no image resolution
            graphs.append(row)
            macs = g.static["macs"]
            noise = 1 + 0.02 * rng.standard_normal(3)
            memory = (10 + 1e-3 * g.static["activation_bytes"] / 2**10) * noise[1]
            row = {
                "device_slug": slug, "arch": arch, "family": family, "resolution": res,
                "batch_size": b, "dtype": "float32", "optimizer": "adam", "device": device,
                "status": "ok", "train_step_ms": scale * (2 + 3e-4 * macs ** 0.9) * noise[0],
                "inference_ms": scale * (0.5 + 1e-4 * macs ** 0.9) * noise[2],
                "device_name": f"test {device}", "threads": 1, "torch_version": "test",
                "date": "2026-11-22T00:00:00+00:00"}
            if device == "cpu":
                row.update(mem_above_baseline_mb=memory, mem_peak_rss_mb=memory + 300)
            else:
                row.update(cuda_max_allocated_mb=memory, cuda_max_reserved_mb=memory * 1.1,
                           nvml_used_mb=memory * 1.1 + 400, power_w_mean=100 + macs ** 0.5 / 100)
            labels.append({**row, **(extra or {})})
    storage.write_table(pa.Table.from_pylist(labels, schema=SCHEMA),
                        storage.join(root, slug, "labels.parquet"))
    storage.write_table(pa.Table.from_pylist(graphs), storage.join(root, GRAPHS_FILE))
    return root
