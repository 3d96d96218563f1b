"""Hostile shape arithmetic is featurized within bounded memory and time.

Each case runs in a fresh subprocess under an address-space limit (``RLIMIT_AS``, 2 GiB) and a
wall-clock timeout: a kill, a traceback or a MemoryError there fails the test. The child also
reports its peak RSS, which must stay far below what the file asks for (a bomb that numpy
evaluated under the limit would still show up there as hundreds of MB).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnx_builders as B
from trappm_ray import errors
from trappm_ray.graph.featurize import featurize

ADDRESS_SPACE = 2 * 2**30
TIMEOUT_S = 60
MAX_RSS_MB = 400  # python + numpy + onnx + protobuf is ~150 MB; a bomb would be 800 MB to 8 TB

CHILD = r"""
import json, resource, sys, time
from trappm_ray import errors
from trappm_ray.graph.featurize import featurize
data = open(sys.argv[1], "rb").read()
t0 = time.monotonic()
try:
    g = featurize(data, batch_size=int(sys.argv[2]))
    out = {"graph": g.summary()["nodes"]}
except errors.ModelError as e:
    out = {"error": str(e)}
out["seconds"] = time.monotonic() - t0
# VmHWM is this process image's own peak; ru_maxrss would include the forking parent's
with open("/proc/self/status") as f:
    out["maxrss_mb"] = next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
print(json.dumps(out))
"""


def _limits():  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_bounded(path: Path, batch: int = 1) -> dict:
    """Featurize ``path`` in a limited subprocess; its one JSON line, or a failure."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(batch)], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=_limits)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# (kind, elements at batch 1, batch): 2e8 float32 (800 MB) fits under the 2 GiB limit, so only
# the RSS check catches it being computed; 9e8 and 1e12 would fail the allocation outright.
CASES = [("range", 10**12, 1), ("range", 2 * 10**8, 1), ("constant_of_shape", 9 * 10**8, 1),
         ("constant_of_shape", 2 * 10**8, 1), ("expand", 9 * 10**8, 1), ("expand", 2 * 10**8, 1),
         ("tile", 9 * 10**8, 1), ("tile", 2 * 10**8, 1), ("concat", 10**7, 1),
         ("constant_of_shape", 2 * 10**8, 64)]


@pytest.mark.parametrize("reads_values", [False, True], ids=["shape-only", "reads-values"])
@pytest.mark.parametrize("kind,elements,batch", CASES)
def test_bomb_is_bounded(tmp_path, kind, elements, batch, reads_values):
    """The issue's bombs (shape-only) are refused before shape inference; the same tensors in a
    model that reads them are featurized with their values left uncomputed."""
    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(B.to_bytes(B.bomb_model(kind, elements, reads_values)))
    assert path.stat().st_size < 1000
    out = run_bounded(path, batch)
    assert ("graph" in out) != ("error" in out), out
    if not reads_values:
        assert out["error"].startswith("no_data_path: "), out
    if "error" in out:
        assert "\n" not in out["error"] and out["error"].split(":")[0].isidentifier(), out
    assert out["maxrss_mb"] < MAX_RSS_MB, out
    assert out["seconds"] < 10, out


def test_fold_cap_is_configurable():
    """Below the cap the same arithmetic is evaluated; above it the value is left unknown."""
    from trappm_ray.graph import shape_fold
    import numpy as np
    v = [np.array([64, 64], np.int64)]
    assert shape_fold.output_size("ConstantOfShape", {}, v) == 4096
    assert shape_fold.output_size("Range", {}, [np.array(0), np.array(10**12), np.array(1)]) \
        == 10**12
    assert shape_fold.output_size("Tile", {}, [np.ones((2, 3)), np.array([5, 7])]) == 210
    assert shape_fold.output_size("Range", {}, [np.array(0), np.array(5), np.array(0)]) is None


def test_node_cap_refuses_200001_nodes():
    from trappm_ray import errors
    from trappm_ray.graph.featurize import featurize
    with pytest.raises(errors.TooLarge, match="200,001 nodes"):
        featurize(B.to_bytes(B.many_nodes_model(200_001)))


def test_time_limit_is_a_typed_error():
    from trappm_ray import errors
    from trappm_ray.graph.featurize import featurize
    from trappm_ray.graph.onnx_io import Limits
    with pytest.raises(errors.TooSlow) as info:
        featurize(B.to_bytes(B.shape_arith_model(divide=True)), limits=Limits(max_seconds=0))
    assert str(info.value).startswith("timeout: ") and info.value.status == 413


@pytest.mark.parametrize("kind", B.BOMB_KINDS)
def test_tensor_beyond_the_largest_device_is_refused(kind):
    """10**12 elements: more than any device in the spec table holds, even at a byte each."""
    with pytest.raises(errors.TooLarge, match="largest device in the spec table"):
        featurize(B.to_bytes(B.bomb_model(kind, 10**12, reads_values=True)), batch_size=1)


def constant_output_model() -> onnx.ModelProto:
    """``y = Relu(w)`` for an initializer ``w``, beside an unused input ``x``."""
    f = onnx.TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node("Relu", ["w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", f, ["N", 4])],
                              [helper.make_tensor_value_info("y", f, [4])],
                              [numpy_helper.from_array(np.ones(4, np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_outputs_that_ignore_the_input_values_are_refused():
    """Shape arithmetic alone is nothing to train or run; control flow passes values on."""
    with pytest.raises(errors.NoDataPath, match="depends on the values of an input"):
        featurize(B.to_bytes(B.bomb_model("expand", 100)))
    with pytest.raises(errors.NoDataPath):  # an output computed from initializers only
        featurize(constant_output_model().SerializeToString())
    assert featurize(B.to_bytes(B.bomb_model("expand", 100, reads_values=True))).num_nodes > 0
