"""Byte-level mutations of valid models: featurize either succeeds or raises a ModelError."""
import random

import pytest

import onnx_builders as B
from trappm_ray import errors
from trappm_ray.graph.featurize import featurize

SEEDS = [B.cnn_model(), B.transformer_block(), B.shape_arith_model(), B.layernorm_gelu_model(),
         B.high_rank_model(), B.conv_model(), B.gemm_model()]


@pytest.mark.parametrize("seed", range(4))
def test_mutated_models_fail_cleanly(seed):
    rng = random.Random(seed)
    bases = [m.SerializeToString() for m in SEEDS]
    outcomes = {"ok": 0, "error": 0}
    for _ in range(1500):
        data = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            featurize(bytes(data), batch_size=rng.choice([1, 3, 64]))
            outcomes["ok"] += 1
        except errors.ModelError as e:
            assert "\n" not in str(e)
            outcomes["error"] += 1
    assert outcomes["ok"] > 0 and outcomes["error"] > 0  # the mutations reach both outcomes
