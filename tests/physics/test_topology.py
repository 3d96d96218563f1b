"""Rings on a mesh of GPUs joined point to point (physics/topology.py) and the bus bandwidth a
cluster with links gives a job on part of a node."""
from __future__ import annotations

import pytest

from trappm_ray.physics import collectives as C
from trappm_ray.physics.topology import parse_links, ring_count

K4 = "0-1:1 0-2:1 0-3:1 1-2:1 1-3:1 2-3:1"


def test_links_parse_both_ways_and_refuse_what_is_not_a_link():
    assert parse_links("0-1:1, 0-3:2") == {(0, 1): 1, (1, 0): 1, (0, 3): 2, (3, 0): 2}
    for bad in ("0-1", "0-0:1", "a-b:1", "0-1:0"):
        with pytest.raises(ValueError, match="links"):
            parse_links(bad)


def test_rings_fill_the_links_without_overfilling_one():
    assert ring_count("0-1:1", 2) == 1 and ring_count("0-1:3", 2) == 3
    # four GPUs all joined by single links: 12 one-way links, 4 taken by each ring; no three whole
    # rings avoid sharing a link, but the six rings at half a link each fill all twelve
    assert ring_count(K4, 4) == pytest.approx(3)
    assert ring_count("0-1:1 1-2:1 2-3:1 3-0:1", 4) == 2  # a plain ring of links: once each way
    assert ring_count(K4, 1) == 0


def test_a_large_mesh_is_counted_in_moments():
    """Eight GPUs all joined by one link each (5,040 rings): an exhaustive search for whole rings
    ran for minutes; the linear program reads the 7 rings a complete mesh decomposes into."""
    import itertools
    import time

    k8 = " ".join(f"{a}-{b}:1" for a, b in itertools.combinations(range(8), 2))
    start = time.perf_counter()
    assert ring_count(k8, 8) == pytest.approx(7)
    assert time.perf_counter() - start < 10


def test_a_gpu_reached_by_one_neighbour_only_hops_through_it():
    # GPU 2 hangs off GPU 0: no ring over direct links; 2 -> 0 -> 1 -> (0) -> 2 through GPU 0
    assert ring_count("0-1:2 0-2:2", 3) == 2  # each ring takes one of each pair's links each way
    assert ring_count("0-1:1 2-3:1", 4) == 0  # two islands: no ring at all


def test_a_partial_dgx1_gets_the_rings_its_gpus_hold():
    """vTrain's measured V100 DGX-1 tables: 22.5, 45, 85, 37, 46, 87, 134 GB/s on 2-8 GPUs; the
    8-GPU figure times the rings of the first n GPUs over the 6 of all eight."""
    dgx1 = C.Cluster.of("dgx-1-v100")
    assert [ring_count(dgx1.links, n) for n in range(2, 9)] == [1, 2, 4, 2, 2, 4, 6]
    assert dgx1.busbw_gbs(2) == pytest.approx(dgx1.intra_busbw_gbs / 6)
    assert dgx1.busbw_gbs(8) == dgx1.intra_busbw_gbs
    assert C.allreduce_ms(1e9, 2, dgx1) > 3 * C.allreduce_ms(1e9, 8, dgx1)  # 6x the rings, 1/1.75 the bytes
    a100 = C.Cluster.of("dgx-a100")  # a switch: every GPU count the full node's figure
    assert {a100.busbw_gbs(n) for n in range(1, 9)} == {a100.intra_busbw_gbs}


def test_a_users_mesh_is_checked_against_its_node():
    mesh = C.Cluster.of({"gpus_per_node": 4, "intra_busbw_gbs": 90, "inter_gbps": 100, "links": K4})
    assert mesh.busbw_gbs(4) == 90 and mesh.busbw_gbs(2) == pytest.approx(30)  # 1 of 3 rings
    with pytest.raises(ValueError, match="GPU 5 of 4"):
        C.Cluster.of({"gpus_per_node": 4, "intra_busbw_gbs": 80, "inter_gbps": 100, "links": "0-5:1"})
    with pytest.raises(ValueError, match="no ring through all 4"):
        C.Cluster.of({"gpus_per_node": 4, "intra_busbw_gbs": 80, "inter_gbps": 100, "links": "0-1:1 2-3:1"})
    island = C.Cluster.of({"gpus_per_node": 2, "intra_busbw_gbs": 80, "inter_gbps": 100, "links": "0-1:1"})
    assert island.busbw_gbs(2) == 80


def test_the_cluster_table_loads_without_the_solver():
    """Every multi-GPU answer reads the table; only a job on part of a meshed node counts rings."""
    import subprocess
    import sys

    code = ("import sys; from trappm_ray.physics.collectives import load_clusters; "
            "load_clusters(); print('scipy.optimize' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
