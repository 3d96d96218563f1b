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

import json
import math
from dataclasses import dataclass
from pathlib import Path

from trappm_ray import devices, errors
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics.collectives import Cluster, check_cluster, cluster_for
from trappm_ray.physics.floors import GPU_MEMORY_TOLERANCE
from trappm_ray.physics.megatron import FUSED_ATTENTION, megatron_setting, padded_vocab
from trappm_ray.physics.parallel import IterationEstimate, Layout, build_stack, iteration, memory_per_gpu
from trappm_ray.physics.power import PowerModel, step_power
from trappm_ray.physics.roofline import OPTIMIZER_BYTES, precision_refusal
from trappm_ray.physics.step_model import step_time
from trappm_ray.serving.model_input import cached_config, checked_config, config_file, config_model, config_params
from trappm_ray.serving.prediction import Estimate, Prediction

# a config's number of blocks, attention heads and hidden size, by the names model types use
LAYER_KEYS = ("n_layer", "num_hidden_layers", "num_layers")
HEAD_KEYS = ("n_head", "num_attention_heads", "num_heads")
HIDDEN_KEYS = ("n_embd", "hidden_size", "d_model")
KV_HEAD_KEYS = ("num_key_value_heads",)  # grouped-query attention: tensor parallelism splits these too
POSITION_KEYS = ("n_positions", "max_position_embeddings")
MICRO_BATCHES = (1, 2, 4, 8, 16)
# A config's one graph is exported by tracing it with one broadcast value per weight, and each
# matrix multiply of the trace copies its weight out (about 2.5 s per billion parameters on two
# cores: a 175B config takes minutes); above this the layout model answers even one GPU.
LARGEST_EXPORTED_PARAMS = 20e9
# 90th percentile of |error| of the layout model on vTrain's A100 Megatron runs (python
# jobs/evaluate_parallel.py, docs/results-parallel.md, 2026-11-28): the interval of a layout's answer.
LAYOUT_ERROR_P90 = {"one node": 0.178, "many nodes": 0.186}


@dataclass(frozen=True)
class LayoutAnswer:
    """One layout's iteration, throughput and memory on its fullest GPU, on ``cluster``."""

    layout: Layout
    iteration: IterationEstimate
    memory_gb: float
    fits: bool
    samples_per_s: float
    cluster: Cluster
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
                "energy_kj_per_iteration": self.energy_kj, "breakdown": self.iteration.to_dict(),
                "where_ms": self.iteration.where()}


def data_parallel_zero(parallel: str | None, gpus: int | None) -> int | None:
    """The ZeRO stage of ``parallel`` where it is data parallelism alone (``dp``, ``fsdp``,
    ``zero1``-``zero3``: any graph is answered in it; 0 without ``parallel``), None for a tensor or
    pipeline layout (a transformers config's)."""
    layout = parse_parallel(parallel, gpus) if parallel else {"tp": 1, "pp": 1, "zero": 0}
    return layout["zero"] if (layout["tp"], layout["pp"]) == (1, 1) else None


def exported_whole(model) -> bool:
    """Whether a one-GPU or data-parallel answer of ``model`` exports its whole graph: any graph,
    and a transformers config of at most :data:`LARGEST_EXPORTED_PARAMS` parameters; a larger
    config is answered by the layout model from one and two of its blocks."""
    return not is_config(model) or config_params(read_config(model), "config") <= LARGEST_EXPORTED_PARAMS


def is_config(model) -> bool:
    """Whether ``model`` is a transformers config (a dict, a ``config.json`` or its folder, a
    cached Hugging Face id) rather than a graph (an ONNX file, bytes, a module)."""
    if isinstance(model, dict):
        return True
    return isinstance(model, (str, Path)) and (config_file(Path(model)) is not None or cached_config(str(model)) is not None)


def read_config(model: str | dict) -> dict:
    """The config dict of a ``config.json``, its folder, a Hugging Face id in the local cache, or
    the dict itself."""
    if isinstance(model, dict):
        return checked_config(model, "config")
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


def plan(model: str | dict, gpus: int, device: str | devices.DeviceSpec, global_batch: int, seq: int,
         precision: str = "amp-fp16",
         optimizer: str = "adam", recompute: bool = True, cluster: str | None = None,
         micro_batches: tuple[int, ...] = MICRO_BATCHES, only: dict[str, int] | None = None) -> list[LayoutAnswer]:
    """Every layout of ``model`` on ``gpus`` GPUs of ``device``, fastest first among those that fit.

    Args:
        model: a transformers config or its dict (:func:`read_config`). gpus: GPUs in all.
        device: the GPU as people name it, or its spec. global_batch: sequences per iteration. seq: tokens each.
        precision, optimizer, recompute: the training setting (checkpointing every block: Megatron's).
        cluster: a ``data/clusters.csv`` name, a JSON file or JSON text (None: the table's first of that GPU).
        only: the layouts whose fields (``tp``, ``pp``, ``dp``, ``zero``, ``micro_batch``) have these values.
    """
    if min(gpus, global_batch, seq) < 1:
        raise errors.BadOption(f"gpus, global batch and seq must be >= 1, got {gpus}, {global_batch}, {seq}")
    spec = device if isinstance(device, devices.DeviceSpec) else devices.resolve(device)
    if (refusal := precision_refusal(spec, precision)) is not None:
        raise errors.UnsupportedOption(refusal)
    if optimizer not in OPTIMIZER_BYTES:
        raise errors.BadOption(f"unknown optimizer {optimizer!r}; expected one of {', '.join(sorted(OPTIMIZER_BYTES))}")
    try:
        nodes = cluster_for(spec, cluster)
    except ValueError as e:
        raise errors.UnsupportedOption(str(e)) from None
    config = read_config(model)
    label = model if isinstance(model, str) else "config"
    layer, heads, hidden = (_key(config, k, w, label) for k, w in
                            ((LAYER_KEYS, "number of blocks"), (HEAD_KEYS, "attention heads"), (HIDDEN_KEYS, "hidden size")))
    blocks = config[layer]
    positions = next((config[k] for k in POSITION_KEYS if isinstance(config.get(k), int)), None)
    if positions is not None and seq > positions:
        raise errors.BadOption(f"{label}: seq {seq} is longer than the model's {positions} positions")
    # tensor parallel ranks split the attention heads, and under grouped-query attention the
    # key/value heads too: only a size dividing both splits them evenly
    split = math.gcd(config[heads], *(config[k] for k in KV_HEAD_KEYS if isinstance(config.get(k), int)))
    options = [lo for lo in layouts(gpus, blocks, split, global_batch, nodes.gpus_per_node, micro_batches)
               if all(getattr(lo, k) == v for k, v in (only or {}).items())]
    if not options:
        asked = "".join(f", {k} {v}" for k, v in (only or {}).items())
        kv = (f" (tensor parallelism splits its key/value heads too: tp divides {split})"
              if split < config[heads] else "")
        raise errors.UnsupportedOption(f"no layout of {blocks} blocks and {config[heads]} heads on {gpus} GPUs "
                                       f"divides a global batch of {global_batch}{asked}{kv}")
    exports = [config_model({**padded_vocab(config), layer: n}, f"{label} ({n} block{'s' * (n > 1)})") for n in (1, 2)]
    setting = megatron_setting(precision, optimizer, recompute)
    act_bytes = 4 if precision in ("fp32", "tf32") else 2
    stacks, steps = {}, {}
    for micro in sorted({lo.micro_batch for lo in options}):
        one, two = (featurize(b, micro, dims={"seq": seq}) for b in exports)
        stacks[micro] = build_stack(one, two, blocks, spec, setting, micro * seq * config[hidden] * act_bytes)
        # its kernel mix drives the power
        steps[micro] = step_time(two, spec, setting, "train", fused_attention=FUSED_ATTENTION)
    power, answers = PowerModel.load(), []
    for lo in options:
        est = iteration(stacks[lo.micro_batch], lo, nodes)
        memory = memory_per_gpu(stacks[lo.micro_batch], lo) / 1e9
        # held at the board's limit as one GPU's answer is (an H100's units would draw 926 W at full clock)
        watts = (step_power(steps[lo.micro_batch], spec, power, busy=min(est.device_ms / est.total_ms, 1.0)).power_w
                 if spec.tdp_w else None)
        answers.append(LayoutAnswer(lo, est, memory, memory <= (spec.memory_gb or 0), global_batch / est.total_ms * 1e3,
                                    nodes, watts))
    return sorted(answers, key=lambda a: (not a.fits, a.iteration.total_ms))


def parse_parallel(text: str, gpus: int | None) -> dict[str, int]:
    """``tp``, ``pp``, ``dp`` and ``zero`` of a layout as users write it: ``dp``, ``fsdp`` (ZeRO-3),
    ``zero1``/``zero2``/``zero3`` (data parallelism over every GPU, states sharded), or
    ``tp=T,pp=P[,dp=D][,zero=Z]`` (``dp`` defaults to what ``gpus`` leaves)."""
    named = {"dp": 0, "ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}
    text = text.strip().lower()
    if text in named:
        if not gpus:
            raise errors.BadOption(f"parallel {text!r} spreads over gpus: give gpus")
        return {"tp": 1, "pp": 1, "dp": gpus, "zero": named[text]}
    out = {"tp": 1, "pp": 1, "zero": 0}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        if key not in ("tp", "pp", "dp", "zero") or not value.isdigit() or int(value) < (0 if key == "zero" else 1):
            raise errors.BadOption(f"parallel {text!r}: expected dp, fsdp, zero1-3 or tp=T,pp=P[,dp=D][,zero=Z], "
                                   f"each a positive number")
        out[key] = int(value)
    if "dp" not in out:
        if not gpus or gpus % (out["tp"] * out["pp"]):
            raise errors.BadOption(f"parallel {text!r}: tp x pp = {out['tp'] * out['pp']} does not divide gpus {gpus}")
        out["dp"] = gpus // (out["tp"] * out["pp"])
    if out["zero"] > 3:
        raise errors.BadOption(f"parallel {text!r}: ZeRO stages are 0-3")
    if gpus and out["tp"] * out["pp"] * out["dp"] != gpus:
        raise errors.BadOption(f"parallel {text!r} uses {out['tp'] * out['pp'] * out['dp']} GPUs, gpus says {gpus}")
    return out


def cluster_text(cluster) -> str | None:
    """A cluster as the options carry it (hashable text): a name or file as given, a dict checked
    and written as JSON (the API's argument, an HTTP body's object)."""
    if not isinstance(cluster, dict):
        return None if cluster is None else str(cluster)
    try:
        check_cluster(cluster)
    except ValueError as e:
        raise errors.BadOption(str(e)) from None
    return json.dumps(cluster, sort_keys=True)


def config_dims(model) -> dict[str, int]:
    """A transformers config's sequence length where none is given: its positions (its context);
    ``model`` a dict or a ``config.json`` path (or its folder); anything else has none."""
    if isinstance(model, (str, Path)) and not str(model).startswith("s3://"):
        model = config_file(Path(model)) or {}
    seq = next((model[k] for k in POSITION_KEYS if isinstance(model.get(k), int)), None) if isinstance(model, dict) else None
    return {"seq": seq} if seq else {}


def layout_prediction(model, micro_batch: int | None, spec: devices.DeviceSpec | None, layout: dict[str, int],
                      global_batch: int | None = None, seq: int | None = None, precision: str | None = None,
                      optimizer: str | None = None, recompute: bool = False, cluster: str | None = None,
                      interval_z: float = 1.96, costing: tuple[int | None, float | None, float | None] = (None, None, None),
                      power_limit_w: float | None = None) -> Prediction:
    """One layout (:func:`parse_parallel`) of a transformers config answered as a prediction: the
    time of one optimizer step over ``global_batch`` sequences (default: one micro-batch per
    replica), memory and power on the fullest GPU (and over every GPU), where the step goes in
    ``distributed``.

    Args:
        seq: tokens per sequence; None: the model's positions (its context length).
        precision, optimizer: None: amp-fp16 and Adam, as Megatron trains.
        costing: (steps, price per GPU-hour, price per kWh): the cost of that many steps (steps None: none).
        power_limit_w: refused (a limit's slowdown is not modelled for a layout), never ignored.
    """
    if micro_batch is None:
        raise errors.BadOption("a layout needs batch_size: the micro-batch")
    if power_limit_w is not None:
        raise errors.UnsupportedOption("a power limit is answered for one GPU or data parallelism, not yet for a "
                                       "tensor, pipeline or ZeRO layout: drop power_limit_w or use parallel='dp'")
    if not isinstance(model, (str, Path, dict)):
        raise errors.NotAModel("a tensor, pipeline or ZeRO layout is answered for a transformers config "
                               "(a config.json, its folder, a cached Hugging Face id, or a dict)")
    if spec is None:
        raise errors.UnsupportedOption("a layout is answered on a GPU: name one (device or device_spec)")
    model = model if isinstance(model, dict) else str(model)
    config = read_config(model)
    seq = seq or config_dims(config).get("seq")
    if seq is None:
        raise errors.BadOption("the config names no positions (n_positions / max_position_embeddings): give dims seq")
    gpus = layout["tp"] * layout["pp"] * layout["dp"]
    global_batch = global_batch or micro_batch * layout["dp"]
    precision, optimizer = precision or "amp-fp16", optimizer or "adam"
    answer = plan(model, gpus, spec, global_batch, seq, precision, optimizer, recompute, cluster,
                  (micro_batch,), {**layout, "micro_batch": micro_batch})[0]
    it, nodes = answer.iteration, answer.cluster
    span = -(-gpus // nodes.gpus_per_node)
    err = LAYOUT_ERROR_P90["many nodes" if span > 1 else "one node"]
    band = lambda v: (v / (1 + err * interval_z / 1.645), v * (1 + err * interval_z / 1.645))  # noqa: E731 - p90 at z 1.645
    memory_mb = answer.memory_gb * 1e9 / 2**20  # MB as every memory answer counts them (MiB)
    label = model if isinstance(model, str) else "config"
    setting = {"precision": precision, "optimizer": optimizer, "recompute": recompute, "gpus": gpus}
    p = Prediction(label, "", micro_batch, Estimate(it.total_ms, *band(it.total_ms), 0.0, "ms"),
                   Estimate(memory_mb, memory_mb * (1 - GPU_MEMORY_TOLERANCE), memory_mb * (1 + GPU_MEMORY_TOLERANCE),
                            0.0, "MB"), None,  # the CUDA memory model's band: no measured layout's memory checks it
                   None if answer.power_w is None else Estimate(answer.power_w, *band(answer.power_w), 0.0, "W"),
                   "physics:parallel", {"slug": spec.slug, "name": spec.name, "kind": spec.kind,
                                        "memory_gb": spec.memory_gb},
                   {"blocks": config[_key(config, LAYER_KEYS, "number of blocks", label)], "seq": seq}, interval_z,
                   options=setting, interval=f"physics only: +-{err:.0%} at the p90 of vTrain's {'multi' if span > 1 else 'single'}-node rows")
    lo = answer.layout
    p.distributed = {"gpus": gpus, "nodes": span, "cluster": nodes.slug, "global_batch": global_batch,
                     "parallel": f"tp={lo.tp},pp={lo.pp},dp={lo.dp}" + (f",zero={lo.zero}" if lo.zero else ""),
                     "fits": answer.fits, **it.to_dict()}
    p.distributed["where_ms"] = it.where()
    p.notes.append(f"{lo.tp} x {lo.pp} x {lo.dp} (tensor x pipeline x data) GPUs of {spec.name} on {span} node(s) of "
                   f"{nodes.name}, micro-batch {micro_batch} of {seq} tokens, {global_batch} sequences per optimizer "
                   f"step: the step model's blocks laid out by trappm_ray/physics/parallel.py (nothing learned); "
                   f"90% of vTrain's Megatron runs read within {err:.0%} on {'many nodes' if span > 1 else 'one node'} "
                   "(docs/results-parallel.md)")
    where = ", ".join(f"{k} {v:.4g} ms" for k, v in it.where().items() if v > 0)
    p.notes.append(f"where the {it.total_ms:.4g} ms step goes on the last stage's GPUs: {where}; each sends "
                   f"{it.intra_node_bytes / 1e9:.3g} GB over its node's links and {it.network_bytes / 1e9:.3g} GB "
                   "over the network per step")
    if answer.power_w is not None:  # every GPU taken to draw what the last stage's do
        p.power = {"limit_w": spec.tdp_w, "train_power_w": answer.power_w, "total_train_power_w": gpus * answer.power_w,
                   "energy_per_step_j": 1e3 * (answer.energy_kj or 0.0), "tdp_w": spec.tdp_w}
    steps, per_hour, per_kwh = costing
    if steps:
        p.training_cost = p.cost(steps, per_hour, per_kwh)
    if not answer.fits:
        p.warnings.append(f"{answer.memory_gb:.1f} GB on the fullest GPU: more than its {spec.memory_gb:g} GB")
    return p


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


__all__ = ["LAYER_KEYS", "HEAD_KEYS", "HIDDEN_KEYS", "MICRO_BATCHES", "LAYOUT_ERROR_P90", "LayoutAnswer",
           "data_parallel_zero", "is_config", "read_config", "layouts", "plan", "parse_parallel", "cluster_text", "config_dims", "layout_prediction", "table"]
