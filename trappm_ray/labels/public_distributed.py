"""Readers of the public multi-GPU measurements (``../shared/data/public-distributed``) as label rows.

* vTrain (``vtrain/data/ground_truth_{single,multi}.csv``): Megatron-DeepSpeed GPT training on
  A100 nodes of 8 GPUs, one iteration over the global batch; arch ``gpt_h{hidden}_a{heads}_l{layers}``
  (a GPT-2-style config of that shape, :mod:`trappm_ray.corpus.text_models`), ``parallelism``
  ``tp{T}-pp{P}-dp{D}``, ``batch_size`` the micro-batch, ``grad_accum`` the micro-batches per
  iteration, activation recompute on (every vTrain config says so).
* Pollux (``pollux/<workload>/placements.csv``): data-parallel T4 steps on AWS g4dn.12xlarge nodes;
  ``placement`` the GPUs per node (``2x2``, ``2+1+1``), ``batch_size`` per GPU; the sync time is kept as
  ``allreduce_ms``.
* Gavel (``gavel/simulation_throughputs.json``): jobs alone on 1-8 K80 or P100 GPUs, packed in one
  server or spread over servers (``placement`` ``packed``/``spread``); ``train_step_ms`` the
  per-GPU iteration (GPUs / the job's summed iterations per second).

Every row names its source, commit, file and license, the interconnect as the source states it
(``cluster``), and what the source does not state. Nothing here is fitted.
"""
from __future__ import annotations

import csv
import json
import os
import re

from trappm_ray.labels.public_rows import Source, measurement

VTRAIN = Source("vtrain", "VIA-Research/vTrain", "f8dda84", "MIT-style (Copyright 2024 VIA Research Group at KAIST)")
POLLUX = Source("pollux", "petuum/adaptdl", "de25dcc", "Apache-2.0")
GAVEL = Source("gavel", "stanford-futuredata/gavel", "c4fa400", "MIT")

VTRAIN_GPU = "a100-sxm4-80gb"  # vTrain says "A100" only: its memory and form factor are not stated
VTRAIN_CLUSTER = ("A100 nodes of 8 GPUs, intra-node 150 GB/s, inter-node 800 Gb/s (vTrain's configs; the "
                  "interconnect hardware is not stated)")
VTRAIN_METHOD = ("vTrain ground truth (Megatron-DeepSpeed, GPT model ShardedGptModel, vocabulary 50,257, "
                 "activation checkpointing on, 1F1B pipeline): measured wall time of one training iteration "
                 "over the global batch; precision and software versions not stated (taken as amp-fp16 + Adam, "
                 "as Megatron trains)")
# Pollux folder -> (arch, optimizer, resolution or sequence length, family, model source)
POLLUX_MODELS = {"imagenet": ("torchvision_resnet50", "sgd-momentum", 224, "resnet", "torchvision"),
                 "cifar10": ("cifar_resnet18", "sgd-momentum", 32, "resnet", "workload"),
                 "bert": ("bert_base_qa", "adamw", 384, "bert", "workload")}
POLLUX_CLUSTER = ("AWS g4dn.12xlarge nodes, 4 T4 on PCIe 3.0 each, 50 Gb/s network (Pollux's benchmark/main.tf; "
                  "T4 per the Pollux paper)")
POLLUX_METHOD = ("Pollux simulator trace (AdaptDL, PyTorch DDP): seconds per training iteration and the part "
                 "spent synchronising gradients, per placement and per-GPU batch; fp32 (not stated)")
# Gavel job type -> (arch, optimizer, resolution, family, model source)
GAVEL_MODELS = {"ResNet-18": ("cifar_resnet18", "sgd-momentum", 32, "resnet", "workload"),
                "ResNet-50": ("torchvision_resnet50", "sgd-momentum", 224, "resnet", "torchvision"),
                "Transformer": ("transformer_mt", "adam", 32, "transformer", "workload"),
                "LM": ("lstm_lm", "sgd", 35, "lstm", "workload"),
                # an autoencoder over MovieLens's 26,744 items: no image or sequence, "resolution" 1
                "Recommendation": ("recoder_ae", "adam", 1, "autoencoder", "workload")}
GAVEL_GPUS = {"k80": "k80", "p100": "p100-pcie-16gb"}
GAVEL_METHOD = ("Gavel throughput table (scheduler/simulation_throughputs.json, key 'null': the job alone): "
                "iterations per second summed over the job's GPUs, each running the listed batch; "
                "train_step_ms = GPUs x 1000 / throughput; servers, network, precision and procedure not stated")
_GAVEL_KEY = re.compile(r"\('(?P<job>.+) \(batch size (?P<batch>\d+)\)', (?P<n>\d+)\)")


def vtrain_arch(hidden: int, heads: int, layers: int) -> str:
    """The label name of a GPT of this shape."""
    return f"gpt_h{hidden}_a{heads}_l{layers}"


def placement(per_node: list[int]) -> str:
    """GPUs per node as a label's ``placement``: ``4x8`` for four nodes of 8, ``2+1+1`` where uneven."""
    if len(set(per_node)) == 1:
        return f"{len(per_node)}x{per_node[0]}"
    return "+".join(map(str, per_node))


def per_node(text: str) -> list[int]:
    """The GPUs on each node of a :func:`placement` (``4x8``: four nodes of 8; ``2+1+1``)."""
    if "x" in text:
        nodes, gpus = text.split("x")
        return [int(gpus)] * int(nodes)
    return [int(g) for g in text.split("+")]


def read_vtrain(folder: str) -> tuple[list[dict], list[str]]:
    """vTrain's one-node and many-node iterations (see the module docstring)."""
    out: list[dict] = []
    for name in ("ground_truth_single.csv", "ground_truth_multi.csv"):
        path = os.path.join(folder, "data", name)
        if not os.path.isfile(path):
            return out, [f"data/{name}: missing"]
        with open(path, newline="", encoding="utf-8-sig") as fh:
            for i, r in enumerate(csv.DictReader(fh)):
                try:
                    tp, pp, dp = (int(r[f"{k} parallelism"]) for k in ("tensor", "pipeline", "data"))
                    micro, glob, seq = int(r["micro batch"]), int(r["global batch"]), int(r["sequence length"])
                    h, a, layers, gpus = int(r["hidden size"]), int(r["attention heads"]), int(r["# layers"]), int(r["# GPUs"])
                except (KeyError, TypeError, ValueError) as e:
                    out.append(measurement(VTRAIN, VTRAIN_GPU, "amp-fp16", "train_step_ms", None, arch="?",
                                           source_file=f"data/{name}", error=f"row {i}: unreadable ({e})"))
                    continue
                accum, rest = divmod(glob, micro * dp)
                out.append(measurement(
                    VTRAIN, VTRAIN_GPU, "amp-fp16", "train_step_ms", r.get("iteration time (ms)"),
                    arch=vtrain_arch(h, a, layers), family="gpt", resolution=seq, seq_len=seq, batch_size=micro,
                    optimizer="adam", memory_format="none", gpus=gpus, parallelism=f"tp{tp}-pp{pp}-dp{dp}",
                    compiled="none", recompute="block", grad_accum=accum, global_batch=glob,
                    nodes=-(-gpus // 8), placement=placement([8] * (gpus // 8) if gpus >= 8 else [gpus]),
                    cluster=VTRAIN_CLUSTER, model_source="hf", method=VTRAIN_METHOD,
                    source_file=f"data/{name} row {i}",
                    error=None if rest == 0 and tp * pp * dp == gpus else
                    f"row {i}: global batch {glob} or {gpus} GPUs do not match the layout"))
    return out, []


def read_pollux(folder: str) -> tuple[list[dict], list[str]]:
    """Pollux's placements of BERT, ResNet-50 and the CIFAR ResNet-18 (see the module docstring)."""
    out: list[dict] = []
    issues = []
    for sub, (arch, optimizer, res, family, source) in POLLUX_MODELS.items():
        path = os.path.join(folder, sub, "placements.csv")
        if not os.path.isfile(path):
            issues.append(f"{sub}/placements.csv: missing")
            continue
        with open(path, newline="") as fh:
            for i, r in enumerate(csv.DictReader(fh)):
                digits = [int(c) for c in str(r.get("placement", "")) if c.isdigit()]
                step, sync = _ms(r.get("step_time")), _ms(r.get("sync_time"))
                gpus, batch = sum(digits), str(r.get("local_bsz", ""))
                error = (None if digits and batch.isdigit() else
                         f"row {i}: placement {r.get('placement')!r} or local_bsz {batch!r} not understood")
                out.append(measurement(
                    POLLUX, "t4", "fp32", "train_step_ms", step, arch=arch, family=family, resolution=res,
                    seq_len=res if family == "bert" else None,
                    batch_size=int(batch) if batch.isdigit() else None,
                    optimizer=optimizer, memory_format="nchw" if family == "resnet" else "none", gpus=gpus,
                    parallelism="single" if gpus == 1 else f"dp{gpus}", compiled="none", recompute="none",
                    grad_accum=1, nodes=len(digits), placement=placement(digits), allreduce_ms=sync,
                    cluster=POLLUX_CLUSTER, model_source=source, method=POLLUX_METHOD,
                    source_file=f"simulator/traces/{sub}/placements.csv row {i}",
                    error=error))
    return out, issues


def read_gavel(folder: str) -> tuple[list[dict], list[str]]:
    """Gavel's jobs alone on 1-8 GPUs (see the module docstring); pairs sharing a GPU are left out."""
    path = os.path.join(folder, "simulation_throughputs.json")
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        return [], [f"simulation_throughputs.json: unreadable ({e})"]
    out = []
    for worker, jobs in data.items():
        gpu, spread = worker.removesuffix("_unconsolidated"), worker.endswith("_unconsolidated")
        if gpu not in GAVEL_GPUS:
            continue
        for key, entry in jobs.items():
            m = _GAVEL_KEY.match(key)
            if not m or m["job"] not in GAVEL_MODELS or (spread and m["n"] == "1"):
                continue  # one GPU "spread" is the packed run again (SOURCES.md)
            arch, optimizer, res, family, source = GAVEL_MODELS[m["job"]]
            n, thr = int(m["n"]), entry.get("null")
            ms = n * 1e3 / float(thr) if isinstance(thr, (int, float)) and thr > 0 else None
            out.append(measurement(
                GAVEL, GAVEL_GPUS[gpu], "fp32", "train_step_ms", ms, arch=arch, family=family, resolution=res,
                batch_size=int(m["batch"]), optimizer=optimizer, memory_format="nchw" if family == "resnet" else "none",
                gpus=n, parallelism="single" if n == 1 else f"dp{n}", compiled="none", recompute="none",
                grad_accum=1, placement="spread" if spread else "packed", model_source=source, method=GAVEL_METHOD,
                cluster="servers of K80 or P100 GPUs; the interconnect is not stated",
                source_file=f"scheduler/simulation_throughputs.json {worker} {key}",
                error=None if ms else "no run alone (throughput 0)"))
    return out, []


def _ms(seconds) -> float | None:
    try:
        return float(seconds) * 1e3
    except (TypeError, ValueError):
        return None


__all__ = ["VTRAIN", "POLLUX", "GAVEL", "vtrain_arch", "placement", "per_node", "read_vtrain", "read_pollux", "read_gavel"]
