"""Collectives and clusters: ring and hierarchical all-reduce, DDP's overlap, the cluster table."""
from __future__ import annotations

import json

import pytest

from onnx_builders import residual_chain
from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics import collectives as C


def test_ring_allreduce_is_latency_plus_the_bus_bytes():
    assert C.ring_allreduce_ms(1e9, 1, 100, 10) == 0.0
    assert C.ring_allreduce_ms(1e9, 8, 100, 10) == pytest.approx((2 * 7 / 8 * 1e9 / 100e9 + 10e-6) * 1e3)


def test_each_ring_step_adds_its_latency():
    """2 (n - 1) steps: a DGX A100's all-reduce latency is the 140 us fitted on its 8-GPU table on 8
    GPUs and 116 us on 2 (vTrain's 1 MiB rows: 45 us on 2, 92 on 8); a user's cluster without a
    step latency keeps one latency for every ring."""
    assert C.ring_allreduce_ms(1e9, 8, 100, 10, 2) == pytest.approx((2 * 7 / 8 * 1e9 / 100e9 + 38e-6) * 1e3)
    a100 = C.Cluster.of("dgx-a100")
    tiny = 1.0  # bytes: the latency alone
    assert C.allreduce_ms(tiny, 8, a100) * 1e3 == pytest.approx(140, abs=0.01)
    assert C.allreduce_ms(tiny, 2, a100) * 1e3 == pytest.approx(116, abs=0.01)
    mine = C.Cluster.of({"gpus_per_node": 8, "intra_busbw_gbs": 50, "inter_gbps": 100})
    assert mine.intra_step_us == 0 and C.allreduce_ms(tiny, 2, mine) == pytest.approx(C.allreduce_ms(tiny, 8, mine))


def test_a_second_node_adds_the_network_step():
    a100 = C.Cluster.of("dgx-a100")
    one, two = C.allreduce_ms(1e9, 8, a100), C.allreduce_ms(1e9, 16, a100)
    assert two == pytest.approx(one + C.ring_allreduce_ms(1e9, 2, a100.inter_gbps / 8, a100.inter_latency_us))
    assert C.allreduce_ms(1e9, 4, a100, nodes=4) > C.allreduce_ms(1e9, 4, a100)  # spread out: the network


def test_a_capped_flow_paces_one_ring_over_every_gpu():
    """NCCL over TCP (Pollux's AWS nodes, 5 Gb/s a flow): each ring crossing between nodes is one
    flow, so the time grows with the GPUs per node, which a hierarchical all-reduce would not."""
    g4dn = C.Cluster.of("aws-g4dn-12xlarge")
    assert g4dn.flow_gbps == 5 and g4dn.flow_gbs == pytest.approx(5 / 8)
    two_by_one, two_by_four = C.allreduce_ms(436e6, 2, g4dn, nodes=2), C.allreduce_ms(436e6, 8, g4dn, nodes=2)
    assert two_by_one == pytest.approx(C.ring_allreduce_ms(436e6, 2, 5 / 8, g4dn.inter_latency_us))
    assert two_by_four / two_by_one == pytest.approx(1.75, rel=0.01)
    uncapped = C.Cluster.of({"gpus_per_node": 4, "intra_busbw_gbs": 10, "inter_gbps": 50})
    assert uncapped.flow_gbs == pytest.approx(50 / 8) and C.allreduce_ms(436e6, 8, uncapped, nodes=2) < two_by_four / 5


def test_ddp_hides_the_all_reduce_behind_a_long_backward_but_not_the_last_bucket():
    a100 = C.Cluster.of("dgx-a100")
    grads = 400e6  # 16 even buckets of 25 MB without a graph
    long = C.exposed_allreduce_ms(grads, 1000.0, 8, a100)
    assert long == pytest.approx(C.allreduce_ms(grads / 16, 8, a100))
    assert C.exposed_allreduce_ms(grads, 0.0, 8, a100) == pytest.approx(16 * C.allreduce_ms(grads / 16, 8, a100))
    # buckets all-reduce one after another, each from when the backward has made it
    buckets = [(100e6, 0.1), (300e6, 1.0)]
    assert C.exposed_allreduce_ms(grads, 10.0, 8, a100, buckets=buckets) == pytest.approx(C.allreduce_ms(300e6, 8, a100))
    slow = C.Cluster.of({"gpus_per_node": 8, "intra_busbw_gbs": 1, "inter_gbps": 1})
    first, second = (C.allreduce_ms(b, 8, slow) for b, _ in buckets)
    assert C.exposed_allreduce_ms(grads, 10.0, 8, slow, buckets=buckets) == pytest.approx(1.0 + first + second - 10.0)


def test_ddp_buckets_follow_the_parameters_in_reverse_as_the_backward_makes_them():
    g = featurize(residual_chain(blocks=8, d=256), batch_size=4)
    b = C.gradient_buckets(g, devices.get("a100-sxm4-80gb"), "fp32", bucket_bytes=0.6e6)
    sizes, ready = [x for x, _ in b], [r for _, r in b]
    assert sum(sizes) == pytest.approx(4 * float(g.static["params"]))
    assert sizes[0] >= C.FIRST_BUCKET_BYTES and all(s >= 0.6e6 for s in sizes[1:-1])
    assert ready == sorted(ready) and 0 < ready[0] < ready[-1] <= 1.0


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


def test_some_fields_change_a_named_cluster_or_the_gpus_own():
    """--gpus-per-node G (a dict of some fields): the rest is the cluster's it changes."""
    h100 = devices.get("h100-sxm5-80gb")
    four = C.cluster_for(h100, json.dumps({"gpus_per_node": 4}))
    own = C.cluster_for(h100)
    assert four.gpus_per_node == 4 and four.inter_gbps == own.inter_gbps / 2 and "gpus_per_node 4" in four.name
    assert C.allreduce_ms(1e9, 8, four) > C.allreduce_ms(1e9, 8, own)  # two nodes: the network joins them
    dgx1 = C.Cluster.of("dgx-1-v100")
    cut = C.Cluster.of({"of": "dgx-1-v100", "gpus_per_node": 4})
    assert not cut.links and cut.intra_busbw_gbs == pytest.approx(dgx1.busbw_gbs(4))  # the rings 4 GPUs hold
    with pytest.raises(ValueError, match="direct links"):
        C.Cluster.of({"of": "dgx-1-v100", "gpus_per_node": 16})
    with pytest.raises(ValueError, match="no field 'gpus'"):
        C.cluster_for(h100, json.dumps({"gpus": 4}))
    with pytest.raises(ValueError, match="at least 1"):
        C.check_cluster({"gpus_per_node": 0})
    C.check_cluster({"inter_node_gbps": 400})  # checked before the GPU is known
    assert C.Cluster.of({"of": "dgx-a100"}) == C.Cluster.of("dgx-a100")


def test_a_gpu_without_a_cluster_in_the_table_is_assumed_in_pcie_servers_of_its_generation():
    h100, l4, v100 = (devices.get(s) for s in ("h100-sxm5-80gb", "l4", "v100-pcie-32gb"))
    assert C.cluster_for(h100).slug == "dgx-h100" and C.cluster_for(devices.get("b200")).slug == "dgx-b200"
    assert C.cluster_for(h100, "aws-p5").slug == "aws-p5"
    ada, volta = C.cluster_for(l4), C.cluster_for(v100)
    assert ada.slug == "pcie4-server" and ada.intra_busbw_gbs == pytest.approx(0.65 * 31.5) and "assumed" in ada.name
    assert volta.slug == "pcie3-server" and volta.gpus_per_node == 8 and volta.gpu == "v100-pcie-32gb"
    assert C.cluster_for(devices.get("h100-pcie-80gb")).intra_busbw_gbs == pytest.approx(0.65 * 63.0)


def test_zero_moves_an_all_reduces_traffic_and_fsdp_half_as_much_again():
    a100, grads, weights = C.Cluster.of("dgx-a100"), 400e6, 200e6
    half = lambda b: C.allreduce_ms(b / 2, 8, a100)  # noqa: E731 - a reduce-scatter or all-gather
    total, exposed = C.sharded_sync_ms(grads, weights, 50.0, 100.0, 8, a100, zero=1)
    assert total == pytest.approx(half(grads) + half(weights))
    # the reduce-scatter hides behind a long backward, the all-gather after the optimizer does not
    assert exposed == pytest.approx(C.exposed_allreduce_ms(grads / 2, 100.0, 8, a100) + half(weights))
    assert C.sharded_sync_ms(grads, weights, 50.0, 100.0, 8, a100, zero=2) == (total, exposed)
    fsdp_total, fsdp_exposed = C.sharded_sync_ms(grads, weights, 50.0, 100.0, 8, a100, zero=3)
    assert fsdp_total == pytest.approx(half(grads) + 2 * half(weights)) and fsdp_exposed == 0.0  # prefetched
    short = C.sharded_sync_ms(grads, weights, 0.1, 0.1, 8, a100, zero=3)[1]
    assert short == pytest.approx(fsdp_total - 0.2)  # passes too short to hide the gathers
    # accumulating over 4 passes gathers and scatters in each of them
    assert C.sharded_sync_ms(grads, weights, 0.1, 0.1, 8, a100, zero=3, passes=4) == pytest.approx(
        (4 * fsdp_total, 4 * short))
    with pytest.raises(ValueError, match="zero must be 1, 2 or 3"):
        C.sharded_sync_ms(grads, weights, 1.0, 1.0, 8, a100, zero=0)
