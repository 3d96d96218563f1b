"""A training iteration under tensor, pipeline and data parallelism (Megatron's layouts).

A transformer is a stack of ``L`` identical blocks plus the rest (embeddings, final norm, the
output head). The step model (:mod:`trappm_ray.physics.step_model`) gives one block's and the
rest's device and host time for one micro-batch; this module lays them out on ``tp x pp x dp``
GPUs the way Megatron-LM runs them (Shoeybi et al. 2019; Narayanan et al., SC'21):

* **Tensor parallelism** splits every block's matrix multiplies and attention heads over ``tp``
  GPUs; each GPU still normalizes, adds the residual and drops out the whole activations
  (:func:`replicated_ms`) and issues every kernel, so neither that nor host time is split. It
  all-reduces the block's activations twice in the forward and twice in the backward (twice more
  where the forward is recomputed), on the device's critical path.
* **Pipeline parallelism** gives each of ``pp`` stages ``L / pp`` blocks (the rest on the last
  stage, whose output head is the costliest part); the 1F1B schedule runs ``n`` micro-batches
  in ``(n - 1)`` times the slowest stage plus one pass through every stage (fill and drain),
  each stage boundary sending activations forward and gradients back.
* **Data parallelism** replicates the pipeline ``dp`` times; the gradients of a GPU's share of
  the parameters are all-reduced after the last micro-batch (no bucketing: not overlapped),
  then the optimizer updates that share. ZeRO (Rajbhandari et al., SC'20) shards across the
  replicas the optimizer state (stage 1), the gradients too (2: reduce-scatter and all-gather,
  the all-reduce's traffic), and the weights too (3, FSDP): each micro-batch all-gathers a
  stage's weights for its forward and again for its backward (and recompute), prefetched under
  the compute; each replica updates only its shard.

Memory per GPU (:func:`memory_per_gpu`, from the CUDA memory model of the block and the rest): a
stage's weights, gradients and optimizer state over ``tp``; the activations each in-flight
micro-batch keeps (1F1B: the first stage holds ``min(pp, n)`` of them; with checkpointing only
each block's input, which tensor parallelism does not split); one block's full activations while
its backward runs, over ``tp``; the rest's on the stages that hold it; workspace and context once.

A stage's micro-batch takes the longer of its host's issue time and its GPUs' device time with
the tensor-parallel all-reduces (eager PyTorch issues ahead of the device, and NCCL's kernels
queue on the stream: the host does not wait for them), then its pipeline sends (Megatron waits
for those). Attention, precision, Adam and the states kept are Megatron's
(:mod:`trappm_ray.physics.megatron`). Calculon (Isaev et al., SC'23) and vTrain (Bang et al.,
MICRO'24) compose the same terms; the check against vTrain's measured A100 iterations is
``docs/results-parallel.md``. :meth:`IterationEstimate.where` gives Driple's view (SIGMETRICS
2022) of where each iteration goes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from trappm_ray.physics.collectives import Cluster, allreduce_ms
from trappm_ray import devices
from trappm_ray.physics.megatron import FUSED_ATTENTION, megatron_state_bytes
from trappm_ray.physics.memory import training_memory, zero_shares
from trappm_ray.physics.roofline import BACKWARD_FACTOR, PRECISIONS
from trappm_ray.physics.step_model import Setting, StepEstimate, node_device_us, step_time
from trappm_ray.physics.units import VECTOR, node_classes

GRAD_BYTES = 2  # fp16/bf16 gradients all-reduced (mixed precision)
@dataclass(frozen=True)
class Layout:
    """How a model is spread over GPUs.

    Attributes:
        tp, pp, dp: tensor, pipeline and data parallel sizes (GPUs = ``tp x pp x dp``).
        micro_batch: samples per micro-batch; global_batch: samples per iteration (all replicas).
        zero: ZeRO stage over the data parallel replicas (0: none; 3: FSDP's full sharding).
    """

    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    zero: int = 0

    def __post_init__(self) -> None:
        if min(self.tp, self.pp, self.dp, self.micro_batch) < 1:
            raise ValueError(f"a layout needs sizes >= 1: {self}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"ZeRO stage must be 0-3, got {self.zero}")
        if self.global_batch % (self.micro_batch * self.dp):
            raise ValueError(f"global batch {self.global_batch} is not a whole number of micro-batches "
                             f"of {self.micro_batch} on {self.dp} data-parallel replicas")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def micro_batches(self) -> int:
        """Micro-batches each pipeline runs per iteration."""
        return self.global_batch // (self.micro_batch * self.dp)


@dataclass(frozen=True)
class Part:
    """One part of a training micro-batch, from the step model (ms): the device's forward and
    backward time, the host's issue time, the optimizer update of the part's parameters, and the
    share of the device time tensor parallelism does not split (:func:`replicated_ms`)."""

    device_ms: float
    host_ms: float
    optimizer_ms: float
    replicated_ms: float = 0.0
    forward_device_ms: float = 0.0  # the forward pass's part of device_ms and of host_ms
    forward_host_ms: float = 0.0

    @classmethod
    def of(cls, step: StepEstimate, replicated: float = 0.0) -> Part:
        return cls(step.device_ms - step.optimizer_ms, step.host_ms, step.optimizer_ms, replicated,
                   step.forward_ms, step.forward_host_ms)

    def __sub__(self, other: Part) -> Part:
        """What ``self`` has beyond ``other`` (a model with one more block: that block)."""
        return Part(self.device_ms - other.device_ms, self.host_ms - other.host_ms,
                    self.optimizer_ms - other.optimizer_ms, self.replicated_ms - other.replicated_ms,
                    self.forward_device_ms - other.forward_device_ms, self.forward_host_ms - other.forward_host_ms)

    def on(self, tp: int) -> float:
        """Device time (ms) on each of ``tp`` tensor-parallel GPUs."""
        return (self.device_ms - self.replicated_ms) / tp + self.replicated_ms

    @property
    def forward_share(self) -> tuple[float, float]:
        """The forward pass's share of the device time and of the host time."""
        return (self.forward_device_ms / self.device_ms if self.device_ms > 0 else 0.0,
                self.forward_host_ms / self.host_ms if self.host_ms > 0 else 0.0)


def replicated_ms(graph, spec: devices.DeviceSpec, setting: Setting, tokens_x_hidden: float) -> float:
    """Device time (ms) of a training micro-batch's kernels that every tensor-parallel GPU runs
    whole: Megatron splits the matrix products and attention's heads, but each GPU normalizes,
    adds the residual and drops out the full ``tokens x hidden`` activations. Those are the vector
    ops whose output is that size; forward, backward (``BACKWARD_FACTOR`` x) and recompute."""
    node_us = node_device_us(graph, spec, setting.precision, fused_attention=FUSED_ATTENTION)
    whole = (node_classes(graph) == VECTOR) & (np.asarray(graph.out_elems, np.float64) == tokens_x_hidden)
    return float(node_us[whole].sum()) * (1 + BACKWARD_FACTOR + setting.recompute) / 1e3


@dataclass(frozen=True)
class PartMemory:
    """One part's training memory (bytes): weights, gradients and optimizer state
    (:func:`megatron_state_bytes`); the activations kept for the backward and the transient peak
    above them (:func:`trappm_ray.physics.memory.training_memory` without checkpointing)."""

    weights: float
    grads: float
    optimizer: float
    saved: float
    transient: float

    def __sub__(self, other: PartMemory) -> PartMemory:
        return PartMemory(self.weights - other.weights, self.grads - other.grads, self.optimizer - other.optimizer,
                          self.saved - other.saved, max(self.transient - other.transient, 0.0))

    def state(self, zero: int, dp: int) -> float:
        """Weights, gradients and optimizer state kept per GPU under ZeRO ``zero`` over ``dp`` replicas."""
        w, g, o = zero_shares(zero, dp)
        return self.weights * w + self.grads * g + self.optimizer * o


@dataclass(frozen=True)
class Stack:
    """A transformer as the layout sees it, at one micro-batch.

    Attributes:
        block, rest: one block and everything else (training, one micro-batch).
        blocks: how many blocks. block_params, rest_params: their parameters.
        boundary_bytes: one block's output activations (micro-batch x sequence x hidden x bytes):
            what tensor parallelism all-reduces and a pipeline stage sends.
        recompute: the forward is recomputed in the backward (activation checkpointing).
    """

    block: Part
    rest: Part
    blocks: int
    block_params: float
    rest_params: float
    boundary_bytes: float
    recompute: bool = False
    block_memory: PartMemory | None = None
    rest_memory: PartMemory | None = None
    fixed_bytes: float = 0.0  # workspace and CUDA context, once per GPU


@dataclass(frozen=True)
class IterationEstimate:
    """One iteration's time (ms) and where it goes, on the slowest stage.

    Attributes:
        total_ms: the iteration. pipeline_ms: the micro-batches through the pipeline (compute,
        tensor-parallel all-reduces, sends), of which bubble_ms is fill and drain.
        stage_ms: one micro-batch on the slowest stage; tp_comm_ms: its all-reduces.
        dp_allreduce_ms, optimizer_ms: after the pipeline.
        device_ms: the time the last stage's GPUs compute in the iteration (the rest is waiting on
            the host, the network or the pipeline): their busy share is ``device_ms / total_ms``.
        tp_waiting_ms, p2p_waiting_ms, host_waiting_ms: of the iteration, the last stage's GPUs
            waiting on their tensor-parallel all-reduces, on their sends to the neighbouring
            stages, and on their host's issue (and ZeRO-3's gathers).
        intra_node_bytes, network_bytes: what each GPU of the last stage sends per iteration over
            its node's links and over the network (all-reduces, stage-to-stage sends, gathers).
    """

    total_ms: float
    pipeline_ms: float
    bubble_ms: float
    stage_ms: float
    tp_comm_ms: float
    p2p_ms: float
    dp_allreduce_ms: float
    optimizer_ms: float
    device_ms: float = 0.0
    tp_waiting_ms: float = 0.0
    p2p_waiting_ms: float = 0.0
    host_waiting_ms: float = 0.0
    intra_node_bytes: float = 0.0
    network_bytes: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def where(self) -> dict[str, float]:
        """Driple's view of the iteration on the last stage's GPUs (ms, summing to ``total_ms``):
        computing, waiting on each kind of communication, in the pipeline's bubble, on the host,
        and the rest idle (a faster stage waiting on a slower one)."""
        parts = {"computing": self.device_ms, "tensor-parallel all-reduces": self.tp_waiting_ms,
                 "stage-to-stage sends": self.p2p_waiting_ms,
                 "pipeline bubble": self.bubble_ms, "data-parallel all-reduce": self.dp_allreduce_ms,
                 "waiting on the host": self.host_waiting_ms}
        rest = self.total_ms - sum(parts.values())
        return {**parts, "idle": rest if rest > 1e-9 * self.total_ms else 0.0}  # not float rounding's 1e-14 ms


def _p2p_ms(nbytes: float, layout: Layout, cluster: Cluster) -> float:
    """One send between adjacent stages: inside a node at two GPUs' bus bandwidth (on a mesh, their
    links') with a collective's fixed latency and one ring step's, over the network once a
    pipeline spans nodes."""
    if layout.pp == 1:
        return 0.0
    if layout.tp * layout.pp > cluster.gpus_per_node:
        return (nbytes / (cluster.flow_gbs * 1e9) + cluster.inter_latency_us * 1e-6) * 1e3
    return (nbytes / (cluster.busbw_gbs(2) * 1e9) + (cluster.intra_latency_us + cluster.intra_step_us) * 1e-6) * 1e3


def iteration(stack: Stack, layout: Layout, cluster: Cluster) -> IterationEstimate:
    """The iteration of ``stack`` laid out as ``layout`` on ``cluster``."""
    if stack.blocks % layout.pp:
        raise ValueError(f"{stack.blocks} blocks do not split into {layout.pp} pipeline stages")
    per_stage = stack.blocks // layout.pp
    tp_nodes = -(-layout.tp // cluster.gpus_per_node)
    reduces = (6 if stack.recompute else 4) * per_stage
    tp_comm = reduces * allreduce_ms(stack.boundary_bytes, layout.tp, cluster, tp_nodes)
    p2p = 2 * _p2p_ms(stack.boundary_bytes, layout, cluster)

    params = (per_stage * stack.block_params + stack.rest_params) / layout.tp  # the last stage's share
    dp_nodes = min(layout.dp, math.ceil(layout.gpus / cluster.gpus_per_node))
    dp_comm = allreduce_ms(params * GRAD_BYTES, layout.dp, cluster, dp_nodes if layout.dp > 1 else None)
    # ZeRO-3: the stage's weights gathered for the forward, the backward (and the recompute) of
    # each micro-batch: an all-gather moves half an all-reduce's traffic
    gathers = (3 if stack.recompute else 2) * dp_comm / 2 if layout.zero == 3 else 0.0

    def device(last: bool) -> float:
        return per_stage * stack.block.on(layout.tp) + last * stack.rest.on(layout.tp)

    def issue(last: bool) -> float:  # the host's time, or ZeRO-3's gathers where they are longer
        return max(per_stage * stack.block.host_ms + last * stack.rest.host_ms, gathers)

    def forward(last: bool) -> tuple[float, float]:  # the forward pass's device and host time
        (bd, bh), (rd, rh) = stack.block.forward_share, stack.rest.forward_share
        return (per_stage * bd * stack.block.on(layout.tp) + last * rd * stack.rest.on(layout.tp),
                per_stage * bh * stack.block.host_ms + last * rh * stack.rest.host_ms)

    def stage(last: bool) -> float:
        if layout.pp == 1:  # the host runs ahead from one pass into the next
            return max(device(last) + tp_comm, issue(last))
        # Megatron synchronizes the device after every exchange between stages (against
        # batch_isend_irecv's race), so the host cannot run ahead from a forward into a backward:
        # each pass is its own max of device and host time
        f_dev, f_host = forward(last)
        f_comm = tp_comm * 2 / (6 if stack.recompute else 4)  # two of a block's all-reduces are the forward's
        return (max(f_dev + f_comm, f_host) + max(device(last) - f_dev + tp_comm - f_comm, issue(last) - f_host)
                + p2p)

    first, last = stage(layout.pp == 1), stage(True)
    slowest = max(first, last)
    # 1F1B: the slowest stage paces every micro-batch; fill and drain pass once through the others
    one_pass = first * (layout.pp - 1) + last if layout.pp > 1 else last
    pipeline = (layout.micro_batches - 1) * slowest + one_pass
    optimizer = (per_stage * stack.block.optimizer_ms + stack.rest.optimizer_ms) / layout.tp
    optimizer /= layout.dp if layout.zero else 1  # each replica updates its shard
    total = pipeline + dp_comm + optimizer
    n = layout.micro_batches
    tp_waiting = max(device(True) + tp_comm - max(issue(True), device(True)), 0.0)  # what the host does not hide
    host_waiting = max(issue(True) - device(True) - tp_comm, 0.0)
    links = traffic(stack, layout, cluster, per_stage, tp_nodes, dp_nodes, params)
    return IterationEstimate(total, pipeline, one_pass - slowest, slowest, tp_comm, p2p, dp_comm, optimizer,
                             n * device(True) + optimizer, n * tp_waiting, n * p2p, n * host_waiting, *links)


def traffic(stack: Stack, layout: Layout, cluster: Cluster, per_stage: int, tp_nodes: int, dp_nodes: int,
            params: float) -> tuple[float, float]:
    """Bytes one GPU of the last stage sends per iteration (intra-node, network): a ring
    all-reduce sends ``2 (n - 1) / n`` of its message, an all-gather half that; a middle stage
    sends each micro-batch's activations on and its gradients back."""
    def ring(size: int) -> float:  # one GPU's share of an all-reduce's message
        return 2 * (size - 1) / size

    n = layout.micro_batches
    tp = n * (6 if stack.recompute else 4) * per_stage * ring(layout.tp) * stack.boundary_bytes
    p2p = n * 2 * stack.boundary_bytes if layout.pp > 1 else 0.0
    dp = ring(layout.dp) * params * GRAD_BYTES
    if layout.zero == 3:
        dp += n * (3 if stack.recompute else 2) * ring(layout.dp) / 2 * params * GRAD_BYTES
    network = {"tp": tp_nodes > 1, "p2p": layout.tp * layout.pp > cluster.gpus_per_node, "dp": dp_nodes > 1}
    sent = {"tp": tp, "p2p": p2p, "dp": dp}
    return (sum(v for k, v in sent.items() if not network[k]), sum(v for k, v in sent.items() if network[k]))


def build_stack(one, two, blocks: int, spec: devices.DeviceSpec, setting: Setting, boundary_bytes: float) -> Stack:
    """The :class:`Stack` of a model of ``blocks`` blocks from the graphs of the same model with
    one block (``one``) and with two (``two``), featurized at the micro-batch: their difference is
    a block, the rest is what the one-block model has besides it."""
    act = PRECISIONS[setting.precision][1]
    steps = [Part.of(step_time(g, spec, setting, "train", fused_attention=FUSED_ATTENTION),
                     replicated_ms(g, spec, setting, boundary_bytes / act)) for g in (one, two)]
    memory = [training_memory(g, "fp32" if setting.precision == "tf32" else setting.precision, setting.optimizer,
                              fused_attention=False, foreach=not setting.fused_optimizer)
              for g in (one, two)]  # FUSED_ATTENTION's memory
    params = [float(g.static["params"]) for g in (one, two)]
    w, g, o = megatron_state_bytes(setting.precision, setting.optimizer)  # held all step, not the peak's terms
    parts = [PartMemory(w * n, g * n, o * n, m.activations_saved, m.transient_peak) for m, n in zip(memory, params)]
    block, block_memory = steps[1] - steps[0], parts[1] - parts[0]
    return Stack(block, steps[0] - block, blocks, params[1] - params[0], 2 * params[0] - params[1], boundary_bytes,
                 setting.recompute, block_memory, parts[0] - block_memory, memory[0].workspace + memory[0].context)


def memory_per_gpu(stack: Stack, layout: Layout) -> float:
    """Training memory of the fullest GPU (bytes): the first stage (most micro-batches in flight)
    or the last (the rest: the output head and its logits), as the module docstring says."""
    if stack.block_memory is None or stack.rest_memory is None:
        raise ValueError("a stack without memory parts: build it with block_memory and rest_memory")
    block, rest = stack.block_memory, stack.rest_memory
    per_stage = stack.blocks // layout.pp
    in_flight = min(layout.pp, layout.micro_batches)

    def stage(first: bool, last: bool) -> float:
        kept = stack.boundary_bytes if stack.recompute else block.saved / layout.tp
        live = (in_flight if first else 1) * per_stage * kept + block.transient / layout.tp
        if stack.recompute:
            live += block.saved / layout.tp  # the block recomputed for its backward
        if last:  # the output head's activations (logits) live on the last stage only
            live += (rest.saved + rest.transient) / layout.tp
        # the rest's weights on both ends: tied input and output embeddings are kept on each
        state = (per_stage * block.state(layout.zero, layout.dp) + rest.state(layout.zero, layout.dp)) / layout.tp
        if layout.zero == 3:  # a block's weights gathered whole while it runs
            live += block.weights / layout.tp
        return state + live + stack.fixed_bytes

    return max(stage(True, layout.pp == 1), stage(layout.pp == 1, True))


__all__ = ["GRAD_BYTES", "Layout", "Part", "replicated_ms", "PartMemory", "Stack", "build_stack", "memory_per_gpu", "IterationEstimate", "iteration", "traffic"]
