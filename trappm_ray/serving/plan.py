"""The fastest ways to spread a transformer over N GPUs: ``trappm-ray plan``.

A transformers config (a ``config.json``, its folder or a Hugging Face id in the local cache; no
weights) is exported with one and with two blocks; the step model and the CUDA memory model of
the two at each micro-batch give one block and the rest, which
:mod:`trappm_ray.physics.parallel` lays out over every tensor x pipeline x data parallel split of
the GPUs that the model allows (tensor parallelism inside a node and across the attention heads,
pipeline stages of whole blocks, micro-batches that divide the global batch, ZeRO stages 0-3). Each layout's
iteration time, throughput, memory on the fullest GPU and power per GPU (the power model at the
share of the iteration the GPUs compute, :mod:`trappm_ray.physics.power`) come back ranked, the
ones that fit the GPU's memory first. Physics only: checked on vTrain's Megatron runs (``docs/results-parallel.md``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from trappm_ray import devices, errors
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics.collectives import cluster_for
from trappm_ray.physics.parallel import IterationEstimate, Layout, build_stack, iteration, memory_per_gpu
from trappm_ray.physics.power import PowerModel, power_at
from trappm_ray.physics.step_model import Setting, step_time
from trappm_ray.serving.model_input import cached_config, checked_config, config_file, config_model

# a config's number of blocks, attention heads and hidden size, by the names model types use
LAYER_KEYS = ("n_layer", "num_hidden_layers", "num_layers")
HEAD_KEYS = ("n_head", "num_attention_heads", "num_heads")
HIDDEN_KEYS = ("n_embd", "hidden_size", "d_model")
KV_HEAD_KEYS = ("num_key_value_heads",)  # grouped-query attention: tensor parallelism splits these too
POSITION_KEYS = ("n_positions", "max_position_embeddings")
MICRO_BATCHES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class LayoutAnswer:
    """One layout's iteration, throughput and memory on its fullest GPU."""

    layout: Layout
    iteration: IterationEstimate
    memory_gb: float
    fits: bool
    samples_per_s: float
    power_w: float | None = None  # per GPU; None where the GPU has no sourced TDP

    @property
    def energy_kj(self) -> float | None:
        """Energy of one iteration over every GPU (kJ)."""
        return None if self.power_w is None else self.power_w * self.layout.gpus * self.iteration.total_ms / 1e6

    def to_dict(self) -> dict:
        lo = self.layout
        return {"tp": lo.tp, "pp": lo.pp, "dp": lo.dp, "zero": lo.zero, "micro_batch": lo.micro_batch,
                "global_batch": lo.global_batch,
                "iteration_ms": self.iteration.total_ms, "samples_per_s": self.samples_per_s,
                "memory_gb_per_gpu": self.memory_gb, "fits": self.fits, "power_w_per_gpu": self.power_w,
                "energy_kj_per_iteration": self.energy_kj, "breakdown": self.iteration.to_dict()}


def read_config(model: str) -> dict:
    """The config dict of a ``config.json``, its folder, or a Hugging Face id in the local cache."""
    found = config_file(Path(model))
    if found is None and (hub := cached_config(model)) is not None:
        found = config_file(hub)
    if found is None:
        raise errors.NotAModel(f"{model}: plan reads a transformers config (config.json, its folder or a cached "
                               "Hugging Face id): layouts split a model's blocks, which an ONNX file does not name")
    return checked_config(found, model)


def _key(config: dict, keys: tuple[str, ...], what: str, label: str) -> str:
    key = next((k for k in keys if isinstance(config.get(k), int)), None)
    if key is None:
        raise errors.NotAModel(f"{label}: the config names no {what} ({' / '.join(keys)})")
    return key


def layouts(gpus: int, blocks: int, heads: int, global_batch: int, gpus_per_node: int,
            micro_batches: tuple[int, ...] = MICRO_BATCHES, zero_stages: tuple[int, ...] = (0, 1, 2, 3)) -> list[Layout]:
    """Every ``tp x pp x dp = gpus`` split with tensor parallelism inside a node and across the
    heads, whole blocks per stage, micro-batches that divide each replica's share, and each ZeRO
    stage where there are replicas to shard over."""
    out = []
    for tp in (t for t in range(1, min(gpus, gpus_per_node) + 1) if gpus % t == 0 and heads % t == 0):
        for pp in (p for p in range(1, blocks + 1) if blocks % p == 0 and (gpus // tp) % p == 0):
            dp = gpus // (tp * pp)
            out += [Layout(tp, pp, dp, m, global_batch, z) for m in micro_batches if global_batch % (m * dp) == 0
                    for z in (zero_stages if dp > 1 else (0,))]
    return out


def plan(model: str, gpus: int, device: str, global_batch: int, seq: int, precision: str = "amp-fp16",
         optimizer: str = "adam", recompute: bool = True, cluster: str | None = None,
         micro_batches: tuple[int, ...] = MICRO_BATCHES, only: dict[str, int] | None = None) -> list[LayoutAnswer]:
    """Every layout of ``model`` on ``gpus`` GPUs of ``device``, fastest first among those that fit.

    Args:
        model: a transformers config (:func:`read_config`). gpus: GPUs in all.
        device: the GPU as people name it. global_batch: sequences per iteration. seq: tokens each.
        precision, optimizer, recompute: the training setting (checkpointing every block: Megatron's).
        cluster: a ``data/clusters.csv`` name or JSON file (None: the table's first of that GPU).
        only: the layouts whose fields (``tp``, ``pp``, ``dp``, ``zero``, ``micro_batch``) have these values.
    """
    if min(gpus, global_batch, seq) < 1:
        raise errors.BadOption(f"gpus, global batch and seq must be >= 1, got {gpus}, {global_batch}, {seq}")
    spec = devices.resolve(device)
    try:
        nodes = cluster_for(spec.slug, cluster, spec.name)
    except ValueError as e:
        raise errors.UnsupportedOption(str(e)) from None
    config = read_config(model)
    layer, heads, hidden = (_key(config, k, w, model) for k, w in
                            ((LAYER_KEYS, "number of blocks"), (HEAD_KEYS, "attention heads"), (HIDDEN_KEYS, "hidden size")))
    blocks = config[layer]
    positions = next((config[k] for k in POSITION_KEYS if isinstance(config.get(k), int)), None)
    if positions is not None and seq > positions:
        raise errors.BadOption(f"{model}: seq {seq} is longer than the model's {positions} positions")
    # tensor parallel ranks split the attention heads, and under grouped-query attention the
    # key/value heads too: only a size dividing both splits them evenly
    split = math.gcd(config[heads], *(config[k] for k in KV_HEAD_KEYS if isinstance(config.get(k), int)))
    options = [lo for lo in layouts(gpus, blocks, split, global_batch, nodes.gpus_per_node, micro_batches)
               if all(getattr(lo, k) == v for k, v in (only or {}).items())]
    if not options:
        asked = "".join(f", {k} {v}" for k, v in (only or {}).items())
        raise errors.UnsupportedOption(f"no layout of {blocks} blocks and {config[heads]} heads on {gpus} GPUs "
                                       f"divides a global batch of {global_batch}{asked}")
    exports = [config_model({**config, layer: n}, f"{model} ({n} block{'s' * (n > 1)})") for n in (1, 2)]
    setting = Setting(precision=precision, optimizer=optimizer, recompute=recompute)
    act_bytes = 4 if precision in ("fp32", "tf32") else 2
    stacks, steps = {}, {}
    for micro in sorted({lo.micro_batch for lo in options}):
        one, two = (featurize(b, micro, dims={"seq": seq}) for b in exports)
        stacks[micro] = build_stack(one, two, blocks, spec, setting, micro * seq * config[hidden] * act_bytes)
        steps[micro] = step_time(two, spec, setting, "train")  # its kernel mix drives the power
    power, answers = PowerModel.load(), []
    for lo in options:
        est = iteration(stacks[lo.micro_batch], lo, nodes)
        memory = memory_per_gpu(stacks[lo.micro_batch], lo) / 1e9
        watts = (power_at(steps[lo.micro_batch], spec, power, 1.0, min(est.device_ms / est.total_ms, 1.0))[0]
                 if spec.tdp_w else None)
        answers.append(LayoutAnswer(lo, est, memory, memory <= (spec.memory_gb or 0), global_batch / est.total_ms * 1e3,
                                    watts))
    return sorted(answers, key=lambda a: (not a.fits, a.iteration.total_ms))


def table(answers: list[LayoutAnswer], top: int, title: str = "") -> str:
    """The first ``top`` answers as a text table under a line naming ``title``."""
    lines = [f"{len(answers)} layouts of {title or 'the model'}, fastest first among those that fit "
             "(physics only: docs/results-parallel.md)",
             f"{'tp':>3} {'pp':>3} {'dp':>4} {'zero':>4} {'micro':>5} {'iteration':>11} {'samples/s':>10} {'GB/GPU':>7} "
             f"{'W/GPU':>6} {'bubble':>8} {'tp comm':>8} {'dp comm':>8}  fits"]
    for a in answers[:top]:
        lo, it = a.layout, a.iteration
        lines.append(f"{lo.tp:>3} {lo.pp:>3} {lo.dp:>4} {lo.zero:>4} {lo.micro_batch:>5} {it.total_ms:>8.1f} ms {a.samples_per_s:>10.1f} "
                     f"{a.memory_gb:>7.1f} {a.power_w or float('nan'):>6.0f} {it.bubble_ms:>5.0f} ms {it.tp_comm_ms * lo.global_batch / lo.micro_batch / lo.dp:>5.0f} ms "
                     f"{it.dp_allreduce_ms:>5.0f} ms  {'yes' if a.fits else 'no'}")
    return "\n".join(lines)


__all__ = ["LAYER_KEYS", "HEAD_KEYS", "HIDDEN_KEYS", "MICRO_BATCHES", "LayoutAnswer", "read_config", "layouts",
           "plan", "table"]
