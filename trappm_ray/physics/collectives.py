"""Collective communication time and the clusters it runs on.

An all-reduce of ``B`` bytes over ``n`` GPUs in a ring moves ``2 (n - 1) / n x B`` through each
GPU's link and takes ``2 (n - 1)`` latency steps (Patarasuk & Yuan, JPDC 2009; NCCL's "bus
bandwidth" is ``B x 2 (n - 1) / n / time``). Over several nodes NCCL reduces inside each node,
all-reduces across nodes, then broadcasts inside each node (hierarchical); the inter-node step
carries a node's whole share through its network links. Where the network caps one connection
(``flow_gbps``: a cloud's TCP flow limit, which NCCL's socket transport meets without RDMA), the
ring over every GPU is paced by its crossings between nodes, each one such flow: on Pollux's AWS
nodes (5 Gb/s a flow) that reads the measured synchronisation, the NIC's 50 Gb/s reads it 5-10x
short (``docs/results-distributed.md``).

Clusters are data (``data/clusters.csv``, :func:`load_clusters`): GPUs per node, the intra-node
bus bandwidth and latency (fitted on vTrain's measured all-reduce tables where they exist, else
the link's figure times a stated share), the inter-node network in Gb/s, each with its source. A
user's cluster is a dict or JSON file of the same fields.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np

from trappm_ray import devices
from trappm_ray.physics.step_model import node_device_us
from trappm_ray.physics.topology import MAX_MESH_GPUS, holds_ring, parse_links, ring_count

CLUSTERS_CSV = Path(__file__).resolve().parents[1] / "data" / "clusters.csv"
DDP_BUCKET_BYTES = 25 * 2**20  # torch DistributedDataParallel's default bucket_cap_mb
FIRST_BUCKET_BYTES = 2**20  # DDP's first bucket (the last layers' gradients) is kept small to start early
DEFAULT_LATENCY_US = 30.0  # a user's cluster without latencies: of the order the tables hold
# A GPU the cluster table has no row of (:func:`pcie_server`): the PCIe generation its architecture
# shipped with, the x16 link's GB/s per direction (PCI-SIG: 8, 16, 32 GT/s per lane with 128b/130b
# coding), the share of it the table's PCIe rows take as bus bandwidth, 8 GPUs a server, 100 Gb/s.
PCIE_GENERATIONS = {"Hopper": 5, "Blackwell": 5, "Ampere": 4, "Ada": 4}
PCIE_X16_GBS = {3: 15.75, 4: 31.5, 5: 63.0}
PCIE_BUS_SHARE = 0.65
PCIE_SERVER_GPUS = 8
PCIE_SERVER_NETWORK_GBPS = 100.0


def _optional(value) -> float:
    """A number the table may leave empty (0: none)."""
    return float(value) if value not in ("", None) else 0.0


NUMERIC: dict[str, Callable[[Any], Any]] = {
    "gpus_per_node": int, "intra_busbw_gbs": float, "intra_latency_us": float, "inter_gbps": float,
    "inter_latency_us": float, "flow_gbps": _optional, "intra_step_us": _optional}
ALIASES = {"intra_node_gbs": "intra_busbw_gbs", "inter_node_gbps": "inter_gbps"}  # the API's spelling


@dataclass(frozen=True)
class Cluster:
    """GPUs per node and the links between them."""

    slug: str
    name: str
    gpu: str
    gpus_per_node: int
    intra_busbw_gbs: float
    intra_latency_us: float
    inter_gbps: float
    inter_latency_us: float
    source: str = ""
    flow_gbps: float = 0.0  # what one network connection carries at most (0: no cap, RDMA)
    intra_step_us: float = 0.0  # inside a node, the latency of each of a ring's 2 (n - 1) steps, beyond intra_latency_us
    links: str = ""  # GPU-to-GPU links of a node without a switch (physics/topology.py); "": switched

    def __post_init__(self):
        object.__setattr__(self, "links", self.links.strip())  # "" and blanks alike: a switched node
        if not self.links:
            return
        gpus = {g for pair in parse_links(self.links) for g in pair}
        if self.gpus_per_node > MAX_MESH_GPUS or max(gpus) >= self.gpus_per_node:
            raise ValueError(f"links name GPUs 0-{self.gpus_per_node - 1} of a node of at most "
                             f"{MAX_MESH_GPUS} GPUs; these name GPU {max(gpus)} of {self.gpus_per_node}")
        if not holds_ring(self.links, self.gpus_per_node):  # checked without the solver: the table loads fast
            raise ValueError(f"links hold no ring through all {self.gpus_per_node} GPUs of a node")

    def busbw_gbs(self, gpus: int) -> float:
        """Bus bandwidth (GB/s) of a ring all-reduce over ``gpus`` GPUs of one node: the table's
        (measured on a full node) where a switch joins them, on a mesh (:attr:`links`) that times
        the rings the first ``gpus`` GPUs hold over those of the full node; GPUs the mesh joins
        by no ring go over PCIe 3.0 (the generation of the mesh systems, :data:`PCIE_BUS_SHARE`)."""
        if not self.links or gpus >= self.gpus_per_node or gpus < 2:
            return self.intra_busbw_gbs
        rings = ring_count(self.links, gpus)
        if not rings:
            return PCIE_BUS_SHARE * PCIE_X16_GBS[3]
        return self.intra_busbw_gbs * rings / ring_count(self.links, self.gpus_per_node)

    @property
    def flow_gbs(self) -> float:
        """GB/s of one connection between nodes: the network's, or its per-flow cap."""
        return min(self.inter_gbps, self.flow_gbps or self.inter_gbps) / 8

    def amended(self, changes: dict) -> Cluster:
        """This cluster with some fields changed (``{"gpus_per_node": 4}``: a user's servers of
        four). Another number of GPUs a node keeps the network per GPU (a NIC per GPU, as DGX and
        HGX systems are built) unless ``inter_gbps`` is given; a mesh node (:attr:`links`) cut to
        fewer GPUs keeps the rings those GPUs hold: the bus bandwidth :meth:`busbw_gbs` reads for
        them, as a switched node of that many."""
        values = {ALIASES.get(k, k): v for k, v in changes.items() if k != "of"}
        unknown = sorted(set(values) - {f.name for f in fields(self)})
        if unknown:
            raise ValueError(f"a cluster has no field {unknown[0]!r} (fields: {', '.join(NUMERIC)}, links)")
        try:
            values = {k: NUMERIC.get(k, str)(v) for k, v in values.items()}
        except (TypeError, ValueError) as e:
            raise ValueError(f"a cluster's fields are numbers: {e}") from None
        if not values:  # {"of": NAME} alone: that cluster as it is
            return self
        label = ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in values.items())
        gpus = values.get("gpus_per_node", self.gpus_per_node)
        if gpus < 1:
            raise ValueError(f"gpus_per_node must be at least 1, not {gpus}")
        if self.links and gpus != self.gpus_per_node and "links" not in values:
            if gpus > self.gpus_per_node:
                raise ValueError(f"{self.name} joins its {self.gpus_per_node} GPUs by direct links, without a "
                                 f"switch: a node of {gpus} is another system (give its links or intra_busbw_gbs)")
            values = {"intra_busbw_gbs": self.busbw_gbs(gpus), "links": "", **values}
        if gpus != self.gpus_per_node and "inter_gbps" not in values:  # a NIC per GPU, as DGX/HGX rails are
            values["inter_gbps"] = self.inter_gbps * gpus / self.gpus_per_node
        return replace(self, slug=f"{self.slug}, {label}", name=f"{self.name} ({label})", **values)

    @classmethod
    def of(cls, value: str | dict | Path, default: Cluster | None = None) -> Cluster:
        """A table name, a dict of the fields (missing ``slug``/``name``/``gpu``/``source`` are
        filled), a JSON object of them as text, or a JSON file of one. A dict that names only some
        of the fields changes a cluster (:meth:`amended`): the one its ``of`` names, else
        ``default`` (the GPU's own, :func:`cluster_for`)."""
        if isinstance(value, dict):
            missing = [k for k in ("gpus_per_node", "intra_busbw_gbs", "inter_gbps")
                       if k not in value and not any(value.get(a) is not None for a, t in ALIASES.items() if t == k)]
            base = cls.of(value["of"]) if value.get("of") else default if missing and value else None
            if base is not None:
                return base.amended(value)
            if missing:
                raise ValueError(f"a cluster needs {', '.join(missing)} (or intra_node_gbs / inter_node_gbps), or "
                                 f"the cluster it changes as 'of'; it has {', '.join(sorted(value)) or 'nothing'}")
            d = {"slug": "custom", "name": "custom cluster", "gpu": "", "intra_latency_us": DEFAULT_LATENCY_US,
                 "inter_latency_us": DEFAULT_LATENCY_US, **{ALIASES.get(k, k): v for k, v in value.items()}}
            try:
                values = {f.name: NUMERIC.get(f.name, str)(d[f.name]) for f in fields(cls) if f.name in d}
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"a cluster needs gpus_per_node, intra_busbw_gbs (intra_node_gbs) and inter_gbps "
                                 f"(inter_node_gbps): {e}") from None
            return cls(**values)  # its links checked against its node (ValueError)
        text = str(value)
        if text.lstrip().startswith("{"):  # a JSON object given inline (the API passes a dict so)
            try:
                return cls.of(json.loads(text), default)
            except json.JSONDecodeError as e:
                raise ValueError(f"a cluster given as JSON does not parse: {e}") from None
        table = load_clusters()
        if text in table:
            return table[text]
        path = Path(text)
        if path.suffix == ".json" and path.is_file():
            return cls.of(json.loads(path.read_text()), default)
        raise ValueError(f"unknown cluster {text!r}; known: {', '.join(table)} (or a JSON file of the fields)")


def with_gpus_per_node(cluster: str | None, gpus_per_node: int | None) -> str | None:
    """``cluster`` as the options carry it (a name, a JSON file or text; None: the GPU's own) with
    ``gpus_per_node`` GPUs a node (``--gpus-per-node``): a change to it (:meth:`Cluster.amended`)."""
    if gpus_per_node is None:
        return cluster
    return json.dumps({"gpus_per_node": gpus_per_node, **({"of": cluster} if cluster else {})})


def check_cluster(value: str | dict | Path) -> None:
    """Raise ValueError if ``value`` is no cluster; changes to the GPU's own (a dict of some
    fields) are checked on a switched node, the GPU being not yet known."""
    Cluster.of(value, Cluster("check", "check", "", PCIE_SERVER_GPUS, 1.0, DEFAULT_LATENCY_US, 1.0, DEFAULT_LATENCY_US))


def cluster_for(spec: devices.DeviceSpec, name: str | None = None) -> Cluster:
    """``name`` (a table name, a JSON file or text), else the table's first cluster of the GPU
    ``spec``, else :func:`pcie_server` of it; a JSON object of some fields changes that default."""
    found = next((c for c in load_clusters().values() if c.gpu == spec.slug), None) or pcie_server(spec)
    return Cluster.of(name, found) if name else found


def pcie_server(spec: devices.DeviceSpec) -> Cluster:
    """What a GPU the table has no cluster of is assumed to run in: servers of
    :data:`PCIE_SERVER_GPUS` on PCIe x16 of the generation its architecture came with (no NVLink),
    :data:`PCIE_BUS_SHARE` of the link's bandwidth as bus bandwidth (as the table's PCIe rows),
    :data:`PCIE_SERVER_NETWORK_GBPS` between them; the name says it is assumed."""
    gen = next((g for prefix, g in PCIE_GENERATIONS.items() if (spec.architecture or "").startswith(prefix)), 3)
    link = PCIE_X16_GBS[gen]
    return Cluster(f"pcie{gen}-server", f"servers of {PCIE_SERVER_GPUS} {spec.name} on PCIe {gen}.0 x16 (assumed: "
                   "the cluster table has none of this GPU; pass --cluster)", spec.slug, PCIE_SERVER_GPUS,
                   PCIE_BUS_SHARE * link, DEFAULT_LATENCY_US, PCIE_SERVER_NETWORK_GBPS, DEFAULT_LATENCY_US,
                   f"PCIe {gen}.0 x16: {link} GB/s per direction, {100 * PCIE_BUS_SHARE:.0f}% as bus bandwidth; "
                   f"{PCIE_SERVER_NETWORK_GBPS:g} Gb/s between servers (all assumed)")


@lru_cache(maxsize=2)
def load_clusters(path: str | Path = CLUSTERS_CSV) -> dict[str, Cluster]:
    """The cluster table by slug."""
    with open(path, newline="", encoding="utf-8") as fh:
        return {r["slug"]: Cluster.of(r) for r in csv.DictReader(fh)}


def ring_allreduce_ms(nbytes: float, n: int, busbw_gbs: float, latency_us: float, step_us: float = 0.0) -> float:
    """One ring all-reduce of ``nbytes`` over ``n`` participants (ms): a fixed latency, ``step_us``
    for each of its ``2 (n - 1)`` steps, and the bytes at the bus bandwidth."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (2 * (n - 1) / n * nbytes / (busbw_gbs * 1e9) + (latency_us + 2 * (n - 1) * step_us) * 1e-6) * 1e3


def allreduce_ms(nbytes: float, gpus: int, cluster: Cluster, nodes: int | None = None) -> float:
    """An all-reduce over ``gpus`` GPUs of ``cluster`` on ``nodes`` nodes (None: nodes filled
    first): in one node a ring, over several the hierarchical form (reduce-scatter and
    all-gather inside each node around an all-reduce of a node's share across nodes on the
    network). Uneven nodes take as long as the fullest."""
    nodes = nodes or -(-gpus // cluster.gpus_per_node)
    per_node = min(-(-gpus // nodes), cluster.gpus_per_node)
    inside = ring_allreduce_ms(nbytes, per_node, cluster.busbw_gbs(per_node), cluster.intra_latency_us,
                               cluster.intra_step_us)
    if nodes == 1:
        return inside
    if cluster.flow_gbps:  # one ring over every GPU, paced by its crossings between nodes
        return ring_allreduce_ms(nbytes, gpus, min(cluster.busbw_gbs(per_node), cluster.flow_gbs), cluster.inter_latency_us)
    return inside + ring_allreduce_ms(nbytes, nodes, cluster.inter_gbps / 8, cluster.inter_latency_us)


def gradient_buckets(graph, spec: devices.DeviceSpec, precision: str, bytes_per_param: float = 4.0,
                     bucket_bytes: float = DDP_BUCKET_BYTES) -> list[tuple[float, float]]:
    """DDP's gradient buckets of ``graph`` as (bytes, share of the backward done when the bucket is
    ready). DDP fills buckets with the parameters in reverse order, the first up to 1 MiB and the
    rest up to ``bucket_bytes`` (a bucket closes once it reaches its cap); a bucket is ready when
    the backward has passed its last parameter's layer. The backward runs the graph's nodes in
    reverse at the step model's forward device time, twice over for a node with weights (the
    gradients of its input and of its weights)."""
    params = np.asarray(graph.params, np.float64)
    back = node_device_us(graph, spec, precision) * np.where(params > 0, 2.0, 1.0)
    done = np.minimum(np.cumsum(back[::-1]) / max(float(back.sum()), 1e-12), 1.0)  # share done after each node, in reverse
    out: list[tuple[float, float]] = []
    size, cap, at = 0.0, float(FIRST_BUCKET_BYTES), 1.0
    for p, ready in zip(params[::-1] * bytes_per_param, done):
        if p <= 0:
            continue
        size, at = size + p, float(ready)
        if size >= cap:
            out.append((size, at))
            size, cap = 0.0, bucket_bytes
    if size > 0:
        out.append((size, at))
    return out


def exposed_allreduce_ms(grad_bytes: float, backward_ms: float, gpus: int, cluster: Cluster,
                         nodes: int | None = None, buckets: list[tuple[float, float]] | None = None) -> float:
    """What gradient synchronisation adds to a data-parallel step: DDP all-reduces each bucket
    (:func:`gradient_buckets`) once the backward has made it and the bucket before it is done;
    what runs past the backward's end is exposed. Without ``buckets`` the gradients are taken as
    made evenly over the backward, in 25 MB buckets."""
    if allreduce_ms(grad_bytes, gpus, cluster, nodes) <= 0:
        return 0.0
    if buckets is None:
        n = max(math.ceil(grad_bytes / DDP_BUCKET_BYTES), 1)
        buckets = [(grad_bytes / n, (i + 1) / n) for i in range(n)]
    end = 0.0
    for size, ready in buckets:
        end = max(end, ready * backward_ms) + allreduce_ms(size, gpus, cluster, nodes)
    return max(end - backward_ms, 0.0)


def sharded_sync_ms(grad_bytes: float, weight_bytes: float, forward_ms: float, backward_ms: float, gpus: int,
                    cluster: Cluster, zero: int, buckets: list[tuple[float, float]] | None = None,
                    passes: int = 1) -> tuple[float, float]:
    """(all, exposed) ms of ZeRO's collectives in one data-parallel step over ``gpus`` GPUs
    (Rajbhandari et al., SC 2020). A ring reduce-scatter or all-gather moves half an all-reduce's
    traffic, so each is costed as an all-reduce of half the bytes.

    * ZeRO-1/2: the gradients are reduce-scattered in buckets as the backward makes them (hidden
      as DDP's all-reduce is, :func:`exposed_allreduce_ms`), and after the optimizer step each
      GPU's updated share of the weights (``weight_bytes``: the training precision's copy) is
      all-gathered, with nothing left to hide it behind.
    * ZeRO-3 / FSDP: the weights are all-gathered layer by layer for the forward and again for
      the backward, prefetched behind the compute, and the gradients reduce-scattered during the
      backward, in each of the step's ``passes`` (gradient accumulation); what outlasts a
      forward or a backward is exposed.

    Args:
        grad_bytes: the gradients reduced (fp32, also under AMP).
        forward_ms, backward_ms: one pass's time on one GPU, what the collectives hide behind.
        buckets: the gradient buckets (:func:`gradient_buckets`), for ZeRO-1/2's reduce-scatter.
    """
    if zero not in (1, 2, 3):
        raise ValueError(f"zero must be 1, 2 or 3, got {zero!r}")
    scatter = allreduce_ms(grad_bytes / 2, gpus, cluster)
    gather = allreduce_ms(weight_bytes / 2, gpus, cluster)
    if zero < 3:
        halved = None if buckets is None else [(size / 2, ready) for size, ready in buckets]
        return scatter + gather, exposed_allreduce_ms(grad_bytes / 2, backward_ms, gpus, cluster, buckets=halved) + gather
    return (passes * (scatter + 2 * gather),
            passes * (max(gather - forward_ms, 0.0) + max(gather + scatter - backward_ms, 0.0)))


__all__ = ["CLUSTERS_CSV", "DDP_BUCKET_BYTES", "Cluster", "cluster_for", "pcie_server", "load_clusters", "with_gpus_per_node", "check_cluster", "ring_allreduce_ms", "allreduce_ms",
           "gradient_buckets", "exposed_allreduce_ms", "sharded_sync_ms"]
