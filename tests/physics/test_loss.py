"""The loss a training step runs after the exported graph's output (physics/loss.py)."""
import numpy as np
import pytest

from trappm_ray import devices
from trappm_ray.graph.featurize import Graph, featurize
from trappm_ray.physics import step_model as S
from trappm_ray.physics.loss import loss_kernels, output_elements

SAMPLE = "data/sample/onnx/resnet10t@64.onnx"

HOST = {"forward": 40.0, "backward": 130.0}


def graph(elems: list[float], edges: list[tuple[int, int]], fed: tuple[int, ...] = (0,)) -> Graph:
    """Nodes of these output elements joined by ``edges``; the nodes in ``fed`` read the data input."""
    n = len(elems)
    out = np.array(elems, float)
    shape = np.zeros((n, 6), np.int64)
    shape[:, 0] = 1
    src, dst = (list(v) for v in zip(*edges)) if edges else ([], [])
    return Graph(ops=["MatMul"] * n, edge_index=np.array([src, dst], np.int64).reshape(2, -1), macs=np.zeros(n),
                 params=np.zeros(n), weight_bytes=np.zeros(n), out_bytes=out * 4, in_shape=shape, out_shape=shape.copy(),
                 n_in=np.ones(n, np.int32), n_out=np.ones(n, np.int32),
                 in_elems=np.array([8.0 if i in fed or any(d == i for _, d in edges) else 0.0 for i in range(n)]),
                 out_elems=out, attrs=np.ones((n, 3), np.int64), static={"batch_size": 1})


def chain(*elems: float) -> Graph:
    """Nodes 0 -> 1 -> ... with these output elements, the last one the model's output."""
    return graph(list(elems), [(i, i + 1) for i in range(len(elems) - 1)])


def test_the_loss_reads_the_largest_output():
    assert output_elements(chain(10, 20, 7)) == 7
    assert output_elements(graph([5.0, 9.0, 4.0], [(0, 1), (0, 2)])) == 9  # nodes 1 and 2 are both outputs
    # a constant no node reads (a causal-mask buffer) is not what the loss reads
    assert output_elements(graph([5.0, 4.0, 1e6], [(0, 1)])) == 4


def test_a_vocabulary_streams_memory_and_a_class_score_costs_host_time():
    logits = 8 * 1024 * 50257.0  # GPT-2's vocabulary at 8 x 1,024 tokens
    (f_host, f_comp, f_mem, _), (b_host, _, b_mem, _) = loss_kernels(chain(1, logits), "amp-bf16", 1e12, 3.0, HOST)
    assert len(f_mem) == 3 and len(b_mem) == 4 and not f_comp.any()
    # bytes per element: fp32 copy 6 + log_softmax 12, then 4 + 12 + 6 back
    assert f_mem.sum() == pytest.approx((18 * logits / 1e12) * 1e6 + 3.0)  # nll_loss: the least time
    assert b_mem.sum() == pytest.approx((22 * logits / 1e12) * 1e6 + 3.0)
    assert f_host.tolist() == [0.0, 40.0, 40.0]  # autocast's copy is issued inside the call
    assert b_host.sum() == 4 * 130.0
    (_, _, f32, _), (_, _, b32, _) = loss_kernels(chain(1, logits), "fp32", 1e12, 3.0, HOST)
    assert len(f32) == 2 and len(b32) == 3  # no copies in fp32
    (_, _, small, _), _ = loss_kernels(chain(1, 64 * 1000.0), "amp-fp16", 1e12, 3.0, HOST)
    assert small.tolist() == [3.0, 3.0, 3.0]  # an ImageNet classifier's: each kernel at the least time


def test_a_training_step_holds_the_loss_and_an_inference_pass_does_not():
    g, spec = featurize(SAMPLE, 32), devices.get("rtx3090")
    train = S.step_time(g, spec, S.Setting("amp-fp16", "none"))
    infer = S.step_time(g, spec, S.Setting("amp-fp16", "none"), "infer")
    # forward, its loss (3 kernels), the loss's backward (4), backward (two per forward kernel)
    assert train.kernels == infer.kernels + 3 + 4 + infer.kernels
