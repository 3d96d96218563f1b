"""Tensor, pipeline and data parallel iterations against vTrain's measured A100 runs
(``docs/results-parallel.md``).

Source: VIA-Research/vTrain @ f8dda84 (MIT-style licence), as label rows in ``data/labels-distributed``
(:mod:`trappm_ray.labels.public_distributed`): GPT models trained with Megatron-DeepSpeed on A100 nodes of 8 GPUs, the wall
time of one iteration (one global batch). One node: 1,440 rows of 2-8 GPUs (hidden 1024/2048,
12-24 layers, 1,024 tokens); many nodes: 88 rows of 64-512 GPUs (3.6 B-39.1 B parameters, 2,048
tokens). Every config states activation checkpointing on, the 1F1B schedule, no gradient
bucketing, 8 GPUs per node, 800 Gb/s between nodes. Not stated, assumed here: mixed precision
fp16 with Adam (Megatron's defaults: the model in half, fp32 master weights; apex's fused Adam), the A100 SXM4 80 GB, GPT-2's vocabulary (50,257; vTrain's default), padded
to 50,304 as Megatron pads it.

Each model is built from its hidden size, heads and sequence length as a GPT-2 config with 1 and
2 blocks (``transformers`` on the meta device, exported once per shape); the step model of the two
at each micro-batch gives one block and the rest (:func:`trappm_ray.physics.parallel.build_stack`),
which :func:`trappm_ray.physics.parallel.iteration` lays out. Nothing is fitted to these rows. The
baseline is perfect scaling: the same step model's work for the global batch divided by the GPUs,
no communication and no pipeline bubble.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from trappm_ray import devices
from trappm_ray.evaluate.campaign import ErrorSummary
from trappm_ray.corpus.text_models import gpt_shape_config
from trappm_ray.graph.featurize import featurize
from trappm_ray.labels.public_distributed import VTRAIN
from trappm_ray.labels.store import read_rows
from trappm_ray.physics.collectives import load_clusters
from trappm_ray.physics.megatron import megatron_setting, padded_vocab
from trappm_ray.physics.parallel import Layout, Stack, build_stack, iteration
from trappm_ray.physics.step_model import HOST_US

log = logging.getLogger(__name__)

LABELS = Path(__file__).resolve().parents[2] / "data" / "labels-distributed"
VTRAIN_SLUG = "a100-sxm4-80gb-amp"
GPU = "a100-sxm4-80gb"
SETTING = megatron_setting("amp-fp16", "adam", recompute=True)
VOCAB = 50257
INTER_GBPS = 800.0  # every vTrain config's inter_node_bandwidth


@dataclass(frozen=True)
class Run:
    """One vTrain measurement."""

    hidden: int
    heads: int
    layers: int
    seq: int
    layout: Layout
    measured_ms: float
    multi_node: bool


def runs(labels: Path = LABELS) -> list[Run]:
    """Every vTrain iteration of the label store (``data/labels-distributed``, imported from
    ``ground_truth_single.csv`` and ``ground_truth_multi.csv`` by
    :mod:`trappm_ray.labels.public_distributed`)."""
    out = []
    for r in read_rows(str(labels), VTRAIN_SLUG).to_pylist():
        if r["status"] != "ok" or r["source_repo"] != VTRAIN.repo:
            continue
        config = gpt_shape_config(r["arch"]) or {}
        tp, pp, dp = (int(x[2:]) for x in r["parallelism"].split("-"))
        layout = Layout(tp, pp, dp, r["batch_size"], r["global_batch"])
        out.append(Run(config["n_embd"], config["n_head"], config["n_layer"], r["resolution"], layout,
                       r["train_step_ms"], r["nodes"] > 1))
    return out


def megatron_175b() -> Run:
    """GPT-3 175B as Megatron-LM trained it on Selene's DGX A100 nodes (Narayanan et al., SC'21,
    Table 1 and section 5.1): 96 blocks of hidden 12,288 and 96 heads, 2,048 tokens, tensor 8 x
    pipeline 16 x data 8 = 1,024 A100s, micro-batch 1, global batch 1,536, 140 TFLOP/s per GPU.
    The iteration is the paper's own FLOP count, ``96 B s l h^2 (1 + s / 6h + V / 16 l h)`` (with
    activation recompute; V = 51,200), over 1,024 x 140 TFLOP/s: 31.5 s."""
    b, s, blocks, h, v = 1536, 2048, 96, 12288, 51200
    flops = 96 * b * s * blocks * h * h * (1 + s / (6 * h) + v / (16 * blocks * h))
    return Run(h, 96, blocks, s, Layout(8, 16, 8, 1, b), flops / (1024 * 140e12) * 1e3, True)


def published(stacked: dict[tuple, Stack]) -> dict:
    """:func:`megatron_175b` on DGX A100 nodes as the cluster table holds them (8 x 200 Gb/s HDR)."""
    r = megatron_175b()
    est = iteration(stacked[(r.hidden, r.heads, r.seq, r.layout.micro_batch, r.layers)], r.layout,
                    load_clusters()["dgx-a100"])
    return {"row": "GPT-3 175B tp8 pp16 dp8 mb1 gb1536 (Megatron-LM, SC'21)", "measured_ms": r.measured_ms,
            "predicted_ms": est.total_ms, "error_pct": 100 * (est.total_ms / r.measured_ms - 1),
            **{f"breakdown_{k}": v for k, v in est.to_dict().items()}}


def gpt_config(hidden: int, heads: int, blocks: int, seq: int) -> dict:
    return padded_vocab({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": hidden, "n_head": heads,
                         "n_layer": blocks, "vocab_size": VOCAB, "n_positions": seq})


def stacks(rows: list[Run], onnx_of) -> dict[tuple, Stack]:
    """The :class:`Stack` of every (hidden, heads, seq, micro-batch, layers) of ``rows``;
    ``onnx_of(config)`` exports a GPT-2 config (ONNX bytes with dynamic batch and seq)."""
    spec = devices.get(GPU)
    out: dict[tuple, Stack] = {}
    for key in sorted({(r.hidden, r.heads, r.seq, r.layout.micro_batch) for r in rows}):
        hidden, heads, seq, micro = key
        one, two = (featurize(onnx_of(gpt_config(hidden, heads, n, seq)), micro, dims={"seq": seq}) for n in (1, 2))
        for layers in sorted({r.layers for r in rows if (r.hidden, r.heads, r.seq, r.layout.micro_batch) == key}):
            out[(*key, layers)] = build_stack(one, two, layers, spec, SETTING, micro * seq * hidden * 2)
        block = out[(*key, layers)].block
        log.info("GPT h%d x %d heads @%d, micro-batch %d: block %.2f ms device, %.2f ms host", hidden, heads, seq,
                 micro, block.device_ms, block.host_ms)
    return out


def ideal_ms(stack: Stack, layout: Layout) -> float:
    """Perfect scaling: the whole global batch's work over the GPUs, no communication or bubble."""
    micro = stack.blocks * stack.block.device_ms + stack.rest.device_ms
    optimizer = stack.blocks * stack.block.optimizer_ms + stack.rest.optimizer_ms
    return (micro * layout.global_batch / layout.micro_batch + optimizer) / layout.gpus


def evaluate(rows: list[Run], stacked: dict[tuple, Stack]) -> tuple[list[dict], dict[str, dict[str, ErrorSummary]]]:
    """Per row the prediction and its breakdown; per answer (``layout model``, ``perfect
    scaling``) the error summaries per group (all, one node, many nodes, by layout)."""
    a100 = load_clusters()["dgx-a100"]
    cluster = replace(a100, slug="vtrain-a100", name="vTrain's A100 nodes", inter_gbps=INTER_GBPS)
    found: list[dict] = []
    errors: dict[str, dict[str, list[tuple[float, str]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        stack = stacked[(r.hidden, r.heads, r.seq, r.layout.micro_batch, r.layers)]
        est = iteration(stack, r.layout, cluster)
        ideal = ideal_ms(stack, r.layout)
        lo = r.layout
        name = f"h{r.hidden} L{r.layers} tp{lo.tp} pp{lo.pp} dp{lo.dp} mb{lo.micro_batch} gb{lo.global_batch}"
        found.append({"row": name, "layouts_of": f"h{r.hidden} L{r.layers} {lo.gpus} GPUs gb{lo.global_batch}",
                      "hidden": r.hidden, "layers": r.layers, "tp": lo.tp, "pp": lo.pp, "dp": lo.dp,
                      "micro_batch": lo.micro_batch, "global_batch": lo.global_batch, "multi_node": r.multi_node,
                      "measured_ms": r.measured_ms, "predicted_ms": est.total_ms, "ideal_ms": ideal,
                      **{f"breakdown_{k}": v for k, v in est.to_dict().items()}})
        groups = ["all", "many nodes" if r.multi_node else "one node",
                  f"{'multi' if r.multi_node else 'single'}: tp>1" if lo.tp > 1 else None,
                  f"{'multi' if r.multi_node else 'single'}: pp>1" if lo.pp > 1 else None,
                  f"{'multi' if r.multi_node else 'single'}: dp only" if lo.tp == lo.pp == 1 else None]
        for answer, ms in (("layout model", est.total_ms), ("perfect scaling", ideal)):
            for g in filter(None, groups):
                errors[answer][g].append((ms / r.measured_ms - 1, name))
    return found, {a: {g: ErrorSummary.of(e) for g, e in gs.items()} for a, gs in errors.items()}


@dataclass(frozen=True)
class Ranking:
    """How well an answer orders the layouts of one model on one GPU count and global batch (the
    choice ``trappm-ray plan`` makes): Spearman's rank correlation per such group of >= 3 rows."""

    groups: int
    median: float
    share_at_least_0_9: float
    worst: float
    worst_group: str


def ranking(found: list[dict], answer: str = "predicted_ms") -> Ranking:
    """:class:`Ranking` of ``answer`` (a key of :func:`evaluate`'s rows) against the measurements."""
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in found:
        groups[row["layouts_of"]].append((row["measured_ms"], row[answer]))
    # an answer that ties every layout of a group (perfect scaling does) ranks none of them: 0
    rho = {g: float(spearmanr(*zip(*rows))[0]) if len({p for _, p in rows}) > 1 and len({m for m, _ in rows}) > 1
           else 0.0 for g, rows in groups.items() if len(rows) >= 3}
    worst = min(rho, key=rho.__getitem__)
    values = np.array(list(rho.values()))
    return Ranking(len(rho), float(np.median(values)), float(np.mean(values >= 0.9)), rho[worst], worst)


def micro_batch_ratios(found: list[dict], answer: str = "predicted_ms") -> dict:
    """Batch scaling alone: within each layout and global batch measured at several micro-batch
    sizes, the error of ``t(m) / t(m_max)`` of ``answer`` against the measured ratio; MAPE, worst
    and the number of ratios (the largest micro-batch of each sweep is its reference)."""
    sweeps: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for row in found:
        sweeps[row["row"].replace(f" mb{row['micro_batch']} ", " ")].append(
            (row["micro_batch"], row["measured_ms"], row[answer]))
    errs = []
    for points in sweeps.values():
        if len(points) < 2:
            continue
        points.sort()
        _, m_ref, p_ref = points[-1]
        errs += [(p / p_ref) / (m / m_ref) - 1 for _, m, p in points[:-1]]
    e = np.abs(np.array(errs))
    return {"sweeps": sum(len(v) > 1 for v in sweeps.values()), "n": int(e.size),
            "mape": float(e.mean() * 100) if e.size else float("nan"), "worst": float(e.max() * 100) if e.size else float("nan")}


def layer_fits(found: list[dict]) -> dict[int, dict[str, float]]:
    """Where one node's error sits: within each layout, micro-batch and global batch measured at 3
    or more block counts, the iteration's line over the blocks, ``t = rest + per_block x L``, of
    the measurements and of the answers; per tensor-parallel size the medians of the rest per
    micro-batch (measured, answered, ms) and of the answered / measured time a block adds."""
    lines: dict[tuple, list[tuple[int, float, float]]] = defaultdict(list)
    for row in found:
        if not row["multi_node"]:
            key = tuple(row[k] for k in ("hidden", "tp", "pp", "dp", "micro_batch", "global_batch"))
            lines[key].append((row["layers"], row["measured_ms"], row["predicted_ms"]))
    per_tp: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    for (_, tp, _, dp, mb, gb), points in lines.items():
        if len({b for b, _, _ in points}) < 3:
            continue
        counts, measured, answered = (np.array(v, float) for v in zip(*points))
        (m_slope, m_rest), (a_slope, a_rest) = (np.polyfit(counts, y, 1) for y in (measured, answered))
        micro = gb / (mb * dp)
        per_tp[tp].append((m_rest / micro, a_rest / micro, a_slope / m_slope))
    return {tp: {"lines": len(v), "rest_measured_ms": float(np.median([r[0] for r in v])),
                 "rest_answered_ms": float(np.median([r[1] for r in v])),
                 "block_ratio": float(np.median([r[2] for r in v]))} for tp, v in sorted(per_tp.items())}


def markdown(found: list[dict], summary: dict[str, dict[str, ErrorSummary]], seconds: float,
             paper: dict | None = None, ranks: dict[str, Ranking] | None = None,
             micro: dict[str, dict] | None = None, layers: dict[int, dict[str, float]] | None = None) -> str:
    """``docs/results-parallel.md`` from :func:`evaluate`'s result (and :func:`published`'s)."""
    one_node = summary.get("layout model", {}).get("one node")
    lines = ["# Tensor, pipeline and data parallelism against vTrain's A100 runs", "",
             f"Generated by `python jobs/evaluate_parallel.py` in {seconds:.0f} s (rows in `docs/results-parallel.json`; "
             "model: `trappm_ray/physics/parallel.py`; rows and assumptions: `trappm_ray/evaluate/parallel.py`). "
             "Each row is one measured Megatron-DeepSpeed iteration of a GPT model on A100 nodes (vTrain, "
             "VIA-Research/vTrain @ f8dda84); errors are predicted / measured - 1 in %. Nothing is fitted to "
             "these rows: the step model's block and rest, laid out by tensor, pipeline and data parallelism. "
             "'Perfect scaling' divides the same work by the GPUs with no communication and no pipeline bubble. "
             "vTrain reports 8.37% MAPE on one node and 14.73% on many for its own predictor (MICRO'24).", ""]
    for answer, groups in summary.items():
        lines += [f"## {answer}", "", "| rows | group | median abs % | MAPE % | p90 abs % | bias % | worst % | worst row |",
                  "|---|---|---|---|---|---|---|---|"]
        for g, e in groups.items():
            lines.append(f"| {e.rows} | {g} | {e.median_abs_pct:.1f} | {e.mean_abs_pct:.1f} | {e.p90_abs_pct:.1f} | "
                         f"{e.median_signed_pct:+.1f} | {e.worst_pct:+.1f} | {e.worst_row} |")
        lines.append("")
    if ranks:
        lines += ["## Ranking one model's layouts", "",
                  "Spearman's rank correlation between an answer and the measurements over the layouts of one "
                  "model (hidden size, blocks) on one GPU count and global batch, groups of 3 or more rows: the "
                  "choice `trappm-ray plan` makes.", "",
                  "| answer | groups | median | share >= 0.9 | worst | worst group |", "|---|---|---|---|---|---|"]
        for answer, r in ranks.items():
            lines.append(f"| {answer} | {r.groups} | {r.median:.3f} | {100 * r.share_at_least_0_9:.0f}% | "
                         f"{r.worst:.2f} | {r.worst_group} |")
        lines.append("")
    if micro:
        lines += ["## Micro-batch scaling alone", "",
                  "Within each layout and global batch vTrain measured at several micro-batch sizes (1-8): the "
                  "error of t(m) / t(m_max), scale-free, the largest micro-batch the reference.", "",
                  "| answer | sweeps | ratios | MAPE % | worst % |", "|---|---|---|---|---|"]
        for answer, m in micro.items():
            lines.append(f"| {answer} | {m['sweeps']} | {m['n']} | {m['mape']:.1f} | {m['worst']:.0f} |")
        lines.append("")
    if layers:
        lines += ["## One node: the blocks against the rest", "",
                  "Within each layout, micro-batch and global batch measured at 3 or more block counts (12-24), "
                  "the line t = rest + per block x blocks through the measurements and through the answers: what "
                  "a block adds and what the rest of the iteration (embeddings, output layer, loss, optimizer, "
                  "per micro-batch) costs, medians per tensor-parallel size.", "",
                  "| tp | lines | rest per micro-batch, measured ms | answered ms | a block, answered / measured |",
                  "|---|---|---|---|---|"]
        for tp, f in layers.items():
            lines.append(f"| {tp} | {f['lines']} | {f['rest_measured_ms']:.1f} | {f['rest_answered_ms']:.1f} | "
                         f"{f['block_ratio']:.2f} |")
        lines.append("")
    if paper is not None:
        lines += ["## A published run at scale", "",
                  f"{paper['row']}: the paper's 140 TFLOP/s per GPU is a {paper['measured_ms'] / 1e3:.1f} s iteration "
                  f"by its own FLOP count; the layout model reads {paper['predicted_ms'] / 1e3:.1f} s "
                  f"({paper['error_pct']:+.1f}%), of which the pipeline bubble is {paper['breakdown_bubble_ms'] / 1e3:.2f} s "
                  f"and the data-parallel all-reduce {paper['breakdown_dp_allreduce_ms']:.0f} ms. The cluster is the "
                  "table's DGX A100 (8 x 200 Gb/s HDR InfiniBand a node); nothing was fitted to this run. "
                  "Calculon (Isaev et al., SC'23) reproduces Megatron-LM's published runs at 3.65% mean error.", ""]
    lines += ["## What limits it", "",
              "Four rules of how Megatron runs a block carry these answers (`physics/parallel.py`, "
              "`physics/units.SOFTMAX`): attention stores its scores once and scales, masks and softmaxes them "
              "in one kernel, with attention dropout after it; tensor parallelism splits the matrix products "
              "and heads but every GPU normalizes, adds and drops out the whole activations; its all-reduces "
              "are kernels on the stream, hidden behind a host-bound GPU's issue time; Adam is apex's fused "
              "kernel. Before them (eager attention, everything split, all-reduces added to the host's time, "
              "torch.optim's foreach Adam) one node read +29% (MAPE 33.7%) and many nodes 10.0%. A fifth is "
              "the pipeline's: Megatron synchronizes the device after every exchange between stages, so a "
              "stage's forward and backward are each the longer of their device and host time, not the whole "
              "micro-batch's (one node 8.4 -> 8.1%, 4-stage pipelines -9.5 -> -7.8% median).",
              "",
              "Tensor parallelism over 8 GPUs of one node reads short (the `tp8` rows): with one-sequence "
              "micro-batches the measured iteration is about the host's issue time plus the all-reduces, as "
              "if every all-reduce waited for the slowest of eight hosts, while at 2 and 4 GPUs the "
              "all-reduces hide as modelled. Host figures are the step model's defaults "
              f"({HOST_US['forward']:.0f} us forward, {HOST_US['backward']:.0f} us backward per kernel, "
              "Megatron's half model casting nothing per product as autocast does: the H200 campaign's host, "
              "torch 2.11, `docs/results-campaign.md`), never measured on vTrain's machines, whose hosts issue "
              "slower: with the figures read off the RTX 3090's labels (40 us forward, 130 backward) one node "
              "read 7.9% MAPE, with the campaign's backward under autocast (71 us) 12.7%, with these "
              f"{one_node.mean_abs_pct if one_node else float('nan'):.1f}%. "
              "Assumed, not stated by the source: mixed precision fp16 (Megatron's: the model in half, fp32 "
              "master weights) with Adam, the A100 SXM4 80 GB, GPT-2's "
              "vocabulary padded to 50,304 as Megatron pads it, Megatron's defaults for attention (fused "
              "softmax, no FlashAttention, dropout 0.1); the cross-entropy over the vocabulary is PyTorch's "
              "fp32 passes (`physics/loss.py`), each tensor-parallel GPU's share of the vocabulary.", ""]
    fits = layers or {}
    one, two = fits.get(1), fits.get(2)
    if one:  # what the table of blocks against the rest says, in words
        lines += [f"Without tensor parallelism a block reads {one['block_ratio']:.2f}x its measured time (median) "
                  "while the rest of an "
                  f"iteration reads {one['rest_answered_ms']:.1f} ms a micro-batch against {one['rest_measured_ms']:.1f} "
                  "measured: the two cancel in the MAPE, so a model with few blocks and many micro-batches reads "
                  "short and one with many blocks long. What the rest holds beyond the step model's output layer, "
                  "loss and optimizer (Megatron's per-micro-batch data and mask preparation, its loss scaling and "
                  "gradient clipping, the embedding's gradient) is not modelled.", ""]
        if two:
            lines += [f"The measured rest falls {one['rest_measured_ms'] / two['rest_measured_ms']:.1f}x from one "
                      f"GPU to two where the answer falls {one['rest_answered_ms'] / two['rest_answered_ms']:.1f}x: "
                      "more than halving the output layer and the loss explains. vTrain's own "
                      "simulator builds that layer from its default vocabulary of 50,257 words split evenly over "
                      "the tensor-parallel GPUs (`src/model/gpt_model.py` @ f8dda84): an odd-sized product on one "
                      "GPU only (25,128 columns each on two). If the measured runs did the same, their one-GPU "
                      "output layer ran without aligned tensor-core loads; how fast an A100 runs such a product "
                      "is measured nowhere here (the H200's ran at about its CUDA cores' rate, "
                      "`physics/units.misaligned`, which on an A100 would read this rest several times too long), "
                      "so the vocabulary stays padded and the rest short.", ""]
    return "\n".join(lines)


__all__ = ["LABELS", "GPU", "SETTING", "Run", "runs", "megatron_175b", "published", "gpt_config", "stacks", "ideal_ms",
           "evaluate", "Ranking", "ranking", "micro_batch_ratios", "layer_fits", "markdown"]
