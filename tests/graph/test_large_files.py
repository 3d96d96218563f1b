"""Large files are read without their weights; the wire-level reader is exact and robust."""
from __future__ import annotations

import io
import json
import random
import subprocess
import sys

import numpy as np
import pytest

import onnx_builders as B
from trappm_ray import errors
from trappm_ray.graph import wire
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.onnx_io import Limits, read_model

WIRE = Limits(weightless_above=0, strip_tensor_bytes=64)  # every file through the wire reader
SEEDS = [B.cnn_model(), B.transformer_block(), B.shape_arith_model(divide=True),
         B.external_data_model("weights.bin"), B.weighty_mlp(2, 64), B.conv_model()]

CHILD = r"""
import json, sys, time
from trappm_ray.graph.featurize import featurize
src = sys.argv[1] if sys.argv[2] == "path" else open(sys.argv[1], "rb").read()
t0 = time.monotonic()
g = featurize(src, batch_size=8)
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 2**10
print(json.dumps({"params": g.static["params"], "seconds": time.monotonic() - t0, "hwm_mb": hwm}))
"""


def _featurize_child(path, how: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), how], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("i", range(len(SEEDS)))
def test_wire_reader_gives_the_same_graph(i):
    data = B.to_bytes(SEEDS[i])
    plain, wired = featurize(data, batch_size=3), featurize(data, batch_size=3, limits=WIRE)
    assert plain.static == wired.static
    assert np.array_equal(plain.params, wired.params) and plain.ops == wired.ops


def test_large_initializers_are_stubs():
    data = B.to_bytes(B.weighty_mlp(3, 256))
    reduced, dropped = wire.read_without_weights(io.BytesIO(data), len(data), 1024)
    assert dropped >= 3 * 256 * 256 * 4 and len(reduced) < len(data) - dropped + 100
    model = read_model(data, Limits(weightless_above=0, strip_tensor_bytes=1024))
    w = {t.name: t for t in model.graph.initializer}["W0"]
    assert list(w.dims) == [256, 256] and not w.raw_data and not w.float_data


@pytest.mark.parametrize("seed", range(4))
def test_wire_reader_on_mutated_bytes(seed):
    """Byte mutations through the wire reader: a graph or a typed error, never a crash."""
    rng = random.Random(seed)
    bases = [B.to_bytes(m) for m in SEEDS]
    for _ in range(400):
        data = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cut = rng.choice([len(data), rng.randrange(1, len(data) + 1)])
        try:
            featurize(bytes(data[:cut]), limits=WIRE)
        except errors.ModelError as e:
            assert "\n" not in str(e)


def test_mid_sized_file_peak_memory(tmp_path):
    """A 64 MiB file: read from a path, peak RSS stays near an empty process's."""
    path = tmp_path / "mlp.onnx"
    B.weighty_mlp(16, 1024, out_path=path)
    size_mb = path.stat().st_size / 2**20
    out = _featurize_child(path, "path")
    assert out["params"] == 16 * (1024 * 1024 + 1024)
    assert out["hwm_mb"] < 150 + 0.25 * size_mb, (out, size_mb)
    out = _featurize_child(path, "bytes")  # as the HTTP app and the API hold it: in memory
    assert out["hwm_mb"] < 150 + 1.5 * size_mb, (out, size_mb)


@pytest.mark.slow
def test_gpt2_small_sized_file_under_twice_its_size(tmp_path):
    """~640 MiB of weights (40 x 2048^2 float32): below 2x the file size from bytes or path."""
    path = tmp_path / "big.onnx"
    B.weighty_mlp(40, 2048, out_path=path)
    size_mb = path.stat().st_size / 2**20
    for how in ("path", "bytes"):
        out = _featurize_child(path, how)
        assert out["params"] == 40 * (2048 * 2048 + 2048)
        assert out["hwm_mb"] < 2 * size_mb, (how, out, size_mb)
