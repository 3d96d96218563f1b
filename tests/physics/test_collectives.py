"""Collectives and clusters: ring and hierarchical all-reduce, DDP's overlap, the cluster table."""
from __future__ import annotations

import json

import pytest

from trappm_ray.physics import collectives as C


def test_ring_allreduce_is_latency_plus_the_bus_bytes():
    assert C.ring_allreduce_ms(1e9, 1, 100, 10) == 0.0
    assert C.ring_allreduce_ms(1e9, 8, 100, 10) == pytest.approx((2 * 7 / 8 * 1e9 / 100e9 + 10e-6) * 1e3)


def test_a_second_node_adds_the_network_step():
    a100 = C.Cluster.of("dgx-a100")
    one, two = C.allreduce_ms(1e9, 8, a100), C.allreduce_ms(1e9, 16, a100)
    assert two == pytest.approx(one + C.ring_allreduce_ms(1e9, 2, a100.inter_gbps / 8, a100.inter_latency_us))
    assert C.allreduce_ms(1e9, 4, a100, nodes=4) > C.allreduce_ms(1e9, 4, a100)  # spread out: the network


def test_ddp_hides_the_all_reduce_behind_a_long_backward_but_not_the_last_bucket():
    a100 = C.Cluster.of("dgx-a100")
    grads = 400e6
    long = C.exposed_allreduce_ms(grads, 1000.0, 8, a100)
    assert long == pytest.approx(C.allreduce_ms(C.DDP_BUCKET_BYTES, 8, a100))
    assert C.exposed_allreduce_ms(grads, 0.0, 8, a100) == pytest.approx(C.allreduce_ms(grads, 8, a100))


def test_clusters_come_from_the_table_a_dict_or_a_file(tmp_path):
    table = C.load_clusters()
    assert {"dgx-a100", "dgx-h100", "aws-g4dn-12xlarge"} <= set(table) and all(c.source for c in table.values())
    mine = C.Cluster.of({"gpus_per_node": 4, "intra_node_gbs": 50, "inter_node_gbps": 100})
    assert mine.intra_busbw_gbs == 50 and mine.inter_gbps == 100 and mine.intra_latency_us == C.DEFAULT_LATENCY_US
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"gpus_per_node": 2, "intra_busbw_gbs": 10, "inter_gbps": 25}))
    assert C.Cluster.of(str(path)).gpus_per_node == 2
    with pytest.raises(ValueError, match="unknown cluster"):
        C.Cluster.of("nope")
    with pytest.raises(ValueError, match="needs intra_busbw_gbs, inter_gbps .*it has gpus_per_node"):
        C.Cluster.of({"gpus_per_node": 4})
