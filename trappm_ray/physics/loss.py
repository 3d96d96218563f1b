"""The loss of a training step: a softmax cross-entropy over the model's output, which an
exported graph does not hold (it ends at the logits) but every training step runs.

For an image classifier it is a few kernels over ``batch x 1,000`` values, host time alone.
For a language model it reads the logits of every token over the whole vocabulary: GPT-2's
50,257 entries at 1,024 tokens are 51 M values a sequence, the largest tensor of the step.
PyTorch's ``F.cross_entropy`` (what Hugging Face's models, timm's scripts and this project's
campaign call; autocast and ``logits.float()`` run it in fp32) launches, per element of the
output (bytes read + written):

* forward: the fp32 copy of half logits (2 + 4, inside autocast's call: no host issue of its
  own), ``log_softmax`` (a max and a sum-of-exponentials pass over its input, then its output:
  4 + 4 + 4), ``nll_loss`` (one value a row: no per-element traffic);
* backward: ``nll_loss``'s gradient (a zero-filled tensor of the output's size, then one value a
  row scattered: 4), ``log_softmax``'s (the incoming gradient and the saved output read, the
  result written: 4 + 4 + 4) and the copy's back to half (4 + 2).

All of it streams memory: each kernel lasts its bytes at the achievable bandwidth, at least a
kernel's least time. Megatron-LM's vocabulary-parallel cross-entropy runs the same passes over
each tensor-parallel GPU's share of the vocabulary.
"""
from __future__ import annotations

import numpy as np

from trappm_ray.physics.graph_walk import walk

HALF_OUTPUT = ("amp-fp16", "amp-bf16", "fp16", "bf16")  # logits in half: copied to fp32 and back
# Per kernel: (bytes per output element, issued from Python at the host's per-kernel rate, run
# only where the logits are half).
FORWARD = ((6.0, False, True), (12.0, True, False), (0.0, True, False))  # fp32 copy, log_softmax, nll_loss
# backward: zero fill, scatter, log_softmax's gradient, the copy back to half
BACKWARD = ((4.0, True, False), (0.0, True, False), (12.0, True, False), (6.0, True, True))


def output_elements(graph) -> float:
    """Elements of the output the loss reads: the largest tensor computed from the data input that
    no node consumes (0: none; a constant left unconsumed, a causal-mask buffer, is no output)."""
    n = graph.num_nodes
    if not n:
        return 0.0
    consumed = np.zeros(n, bool)
    consumed[np.asarray(graph.edge_index[0], np.int64)] = True
    outputs = ~consumed & walk(graph).dep[:n]
    return float(np.max(np.asarray(graph.out_elems)[outputs])) if outputs.any() else 0.0


def loss_kernels(graph, precision: str, bandwidth: float, least_us: float, host_us: dict[str, float]
                 ) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """The loss's kernels as the step model lays kernels out: for its forward and its backward,
    per kernel (host issue time, compute time, memory time, least device time) in us.

    Args:
        graph: a featurized graph at the step's batch.
        precision: the step's precision (a half one adds the fp32 copy and its way back).
        bandwidth: achievable memory bandwidth (B/s).
        least_us: the least device time of any kernel.
        host_us: ``{"forward": us, "backward": us}``, the host's issue time per kernel.
    """
    elems = output_elements(graph)
    scale = 2.0 if precision == "fp64" else 1.0  # fp64 logits stay in fp64
    half = precision in HALF_OUTPUT

    def kernels(table, host: float) -> tuple[np.ndarray, ...]:
        rows = [(b, issued) for b, issued, half_only in table if elems > 0 and (half or not half_only)]
        memory = np.array([max(b * scale * elems / bandwidth * 1e6, least_us) for b, _ in rows])
        return (np.array([host if issued else 0.0 for _, issued in rows]), np.zeros(len(rows)), memory,
                np.full(len(rows), least_us))
    return kernels(FORWARD, host_us["forward"]), kernels(BACKWARD, host_us["backward"])


__all__ = ["HALF_OUTPUT", "FORWARD", "BACKWARD", "output_elements", "loss_kernels"]
