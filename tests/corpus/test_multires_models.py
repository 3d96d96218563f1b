"""Multi-branch, multi-resolution nets built in plain torch."""
from __future__ import annotations

import pytest

from trappm_ray.corpus import multires_models as M
from trappm_ray.graph.featurize import featurize


def test_names_round_trip_and_bad_names_are_refused():
    assert M.parse(M.name(32, 3)) == (32, 3, 1)
    assert M.parse(M.name(18, 4, 2)) == (18, 4, 2)
    for bad in ("resnet50", "multires_w0_b2", "multires_w18_b9", "multires_wx_b2"):
        with pytest.raises(ValueError):
            M.parse(bad)


def test_branches_exchange_through_upsampling_and_strided_convs():
    two, three = (featurize(M.export(M.name(8, b), 64), 2) for b in (2, 3))
    for g, branches in ((two, 2), (three, 3)):
        # every exchange upsamples each lower branch into each higher one; the head upsamples too
        exchanges = sum(k * (k - 1) // 2 for k in range(1, branches + 1)) + branches - 1
        assert g.ops.count("Resize") == exchanges
    assert three.static["params"] > two.static["params"] and three.num_nodes > two.num_nodes
    with pytest.raises(ValueError, match="multiple of 32"):
        M.export(M.name(8, 2), 100)
