"""Python shape rules for nodes whole-graph inference leaves unknown (``graph/shape_rules.py``)."""
from __future__ import annotations

import numpy as np

from trappm_ray.graph.shape_rules import output_shapes


def test_constant_of_shape_takes_its_shape_from_the_input_value():
    assert output_shapes("ConstantOfShape", {}, [(3,)], [np.array([2, 512, 1024])]) == [(2, 512, 1024)]
    assert output_shapes("ConstantOfShape", {}, [(3,)], [None]) is None  # value unknown: no rule


def test_topk_keeps_k_along_its_axis_for_values_and_indices():
    out = output_shapes("TopK", {"axis": 1}, [(2, 512), (1,)], [None, np.array([64])])
    assert out == [(2, 64), (2, 64)]
    assert output_shapes("TopK", {}, [(2, 8, 5), (1,)], [None, np.array([3])]) == [(2, 8, 3)] * 2
    assert output_shapes("TopK", {"axis": 1}, [(2, 16), (1,)], [None, np.array([64])]) is None  # k > axis
