"""The CUDA training-memory model on tiny graphs whose answers are worked out by hand."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests import onnx_builders as ob
from trappm_ray.graph.featurize import Graph, featurize
from trappm_ray.physics import censored
from trappm_ray.physics.folded_norm import folded_norm_mask, guess_folded_norm
from trappm_ray.physics.graph_walk import checkpoint_segments, walk
from trappm_ray.physics.memory import (
    CONTEXT_BYTES,
    CUBLAS_WORKSPACE,
    fitting_batch,
    OPTIMIZERS,
    MiB,
    training_memory,
)

B = 32


def rb(x: float) -> float:
    """The allocator's 512-byte rounding."""
    return float(np.ceil(x / 512) * 512)


def make_graph(nodes: list[tuple], batch: int = B, input_elems: int = 0) -> Graph:
    """A Graph from ``(op, [pred indices], out_elems, params)`` rows in topological order.

    Node 0 (and any node without predecessors) reads the data input of ``input_elems``.
    """
    n = len(nodes)
    src = [p for i, (_, ps, _, _) in enumerate(nodes) for p in ps]
    dst = [i for i, (_, ps, _, _) in enumerate(nodes) for _ in ps]
    out_elems = np.array([float(e) for _, _, e, _ in nodes])
    params = np.array([float(p) for _, _, _, p in nodes])
    in_elems = np.array([input_elems if not ps else sum(out_elems[p] for p in ps)
                         for _, ps, _, _ in nodes], float)
    shape = np.zeros((n, 6), np.int64)
    shape[:, :4] = [batch, 4, 8, 8]
    return Graph(ops=[op for op, _, _, _ in nodes], edge_index=np.array([src, dst], np.int32),
                 macs=np.zeros(n), params=params, weight_bytes=params * 4, out_bytes=out_elems * 4,
                 in_shape=shape, out_shape=shape.copy(),
                 n_in=np.array([3 if op == "Conv" else 1 + (w > 0) for op, _, _, w in nodes]),
                 n_out=np.ones(n, np.int32), in_elems=in_elems, out_elems=out_elems,
                 attrs=np.ones((n, 3), np.int64), static={"batch_size": batch})


X, C, P, K = 3 * 64 * B, 4 * 64 * B, 4 * B, 10 * B  # input, conv/relu, pooled, logits elements
W_CONV, W_FC = 4 * 3 * 9 + 4, 4 * 10 + 10


def cnn(extra: list[tuple] | None = None) -> Graph:
    """x -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm (the pooled tensor is > 64)."""
    nodes = [("Conv", [], C, W_CONV), ("Relu", [0], C, 0), ("GlobalAveragePool", [1], P, 0),
             ("Flatten", [2], P, 0), ("Gemm", [3], K, W_FC)]
    return make_graph(nodes + (extra or []), input_elems=X)


def est(g, **kw):
    kw.setdefault("folded_norm", np.zeros(g.num_nodes, bool))
    return training_memory(g, **{"precision": "fp32", "optimizer": "sgd", **kw})


def test_saved_activations_by_operator_class():
    e = est(cnn())
    # input (always live) + relu output (saved by Relu and by the pool) + pooled (saved by Gemm,
    # through the Flatten view) + logits (kept until their backward); the conv output is freed.
    assert e.saved_at_backward == rb(X * 4) + rb(C * 4) + rb(P * 4) + rb(K * 4)
    assert e.input_bytes == X * 4


def test_weights_grads_optimizer_and_floor():
    w = (W_CONV + W_FC) * 4.0
    for opt, (n_state, _, _) in OPTIMIZERS.items():
        e = est(cnn(), optimizer=opt, grads_set_to_none=False)
        assert e.floor == w * (2 + n_state)
        assert e.allocated >= e.floor and e.reserved >= e.allocated
        assert e.optimizer_state == pytest.approx(sum(rb(x * 4) for x in (W_CONV, W_FC)) * n_state)
    assert est(cnn(), optimizer="adam").floor > est(cnn(), optimizer="sgd-momentum").floor


def test_precision_effects():
    g = cnn()
    fp32, amp, half, dbl = (est(g, precision=p) for p in ("fp32", "amp-fp16", "fp16", "fp64"))
    assert amp.floor == fp32.floor and half.floor == fp32.floor / 2 and dbl.floor == 2 * fp32.floor
    assert amp.weight_cast_cache == (W_CONV + W_FC) * 2 and fp32.weight_cast_cache == 0
    # autocast: conv output half, so the relu output is half; the input stays fp32 but the conv
    # keeps a half copy of it
    assert amp.saved_at_backward - amp.input_bytes < fp32.saved_at_backward - fp32.input_bytes
    assert dbl.saved_at_backward == pytest.approx(2 * fp32.saved_at_backward, rel=0.01)


def test_monotone_and_linear_in_batch():
    g = cnn()
    peaks = [est(g, batch_size=b).allocated for b in (1, 8, 32, 128, 512)]
    assert all(a < b for a, b in itertools.pairwise(peaks))
    w = walk(g)
    s64, s128 = (est(g, batch_size=b, walked=w).saved_at_backward for b in (64, 128))
    assert s128 == pytest.approx(2 * s64, rel=0.01)


def test_reserved_never_falls_as_the_batch_grows():
    # convnext_atto at 64 px: the allocated peak moves from the optimizer's many parameter-sized
    # blocks (b <= 8) to the backward's activations (b >= 16); the optimizer's segments stay mapped
    g = featurize("data/sample/onnx/convnext_atto@64.onnx", 8)
    reserved = [training_memory(g, "amp-fp16", "sgd-momentum", batch_size=b).reserved
                for b in (1, 2, 4, 8, 16, 32, 64)]
    assert all(a <= b for a, b in itertools.pairwise(reserved)), reserved


def test_featurized_batch_matches_scaled_batch():
    proto = ob.cnn_model(batch="N", hw=16)
    g8, g64 = featurize(proto, batch_size=8), featurize(proto, batch_size=64)
    a = training_memory(g8, precision="fp32", batch_size=64, folded_norm=folded_norm_mask(proto))
    b = training_memory(g64, precision="fp32", folded_norm=folded_norm_mask(proto))
    assert a.saved_at_backward == pytest.approx(b.saved_at_backward, rel=0.02)


def test_maxpool_keeps_int64_indices():
    base = est(cnn([("Relu", [4], K, 0)]))
    g = make_graph([("Conv", [], C, W_CONV), ("MaxPool", [0], C // 4, 0),
                    ("GlobalAveragePool", [1], P, 0), ("Gemm", [2], K, W_FC)], input_elems=X)
    e = est(g)
    # input, conv output (saved by the pool), pool output (saved by GAP), indices, pooled, logits
    assert e.saved_at_backward == (rb(X * 4) + rb(C * 4) + rb(C // 4 * 4) + rb(C // 4 * 8)
                                   + rb(P * 4) + rb(K * 4))
    assert base.saved_at_backward > 0


def test_silu_chain_is_one_fused_op():
    # conv -> Sigmoid -> Mul(conv, sigmoid): PyTorch's SiLU keeps only its input
    g = make_graph([("Conv", [], C, W_CONV), ("Sigmoid", [0], C, 0), ("Mul", [0, 1], C, 0),
                    ("GlobalAveragePool", [2], P, 0), ("Gemm", [3], K, W_FC)], input_elems=X)
    e = est(g)
    assert e.saved_at_backward == rb(X * 4) + rb(C * 4) * 2 + rb(P * 4) + rb(K * 4)
    # an SE-style gate (Mul of two different tensors) keeps both operands instead
    w = walk(g)
    assert w.fused[2] and not w.real[1]


def test_a_chain_through_pow_is_python_arithmetic_run_op_by_op():
    # GELU's tanh form: Hugging Face's NewGELUActivation writes x**3 with torch.pow (eager runs
    # its eight ops one by one: the H200 campaign's GPT-2 rows read 27-32% short fused), F.gelu's
    # export cubes by multiplying (one kernel in PyTorch, keeping its input)
    tail = [("Mul", None, C, 0), ("Tanh", None, C, 0), ("Add", None, C, 0)]  # c * r, tanh, 1 + t

    def gelu(cube: list[tuple]) -> Graph:
        k = len(cube)  # nodes: 0 conv x, cube 1..k, 0.044715 * x^3, x + ., the tail, 0.5 * x, v * u
        nodes = [("Conv", [], C, W_CONV), *cube, ("Mul", [k], C, 0), ("Add", [0, k + 1], C, 0)]
        nodes += [(op, [len(nodes) + j - 1], e, w) for j, (op, _, e, w) in enumerate(tail)]
        u = len(nodes) - 1
        nodes += [("Mul", [0], C, 0), ("Mul", [u + 1, u], C, 0)]
        y = len(nodes) - 1
        return make_graph(nodes + [("GlobalAveragePool", [y], P, 0), ("Gemm", [y + 1], K, W_FC)], input_elems=X)
    powed = gelu([("Pow", [0], C, 0)])
    multiplied = gelu([("Mul", [0, 0], C, 0), ("Mul", [1, 0], C, 0)])
    assert walk(multiplied, arithmetic=True).fused[-3] and walk(powed).fused[-3]  # read as one op
    w = walk(powed, arithmetic=True)
    assert w.real[1] and not w.fused[-3]
    # fused: x and the output; op by op also the tail's input r, its output u and 0.5 * x
    assert est(powed).saved_at_backward - est(multiplied).saved_at_backward == 3 * rb(C * 4)


def test_folded_batchnorm_restores_its_input():
    g = cnn()
    plain = est(g, folded_norm=np.zeros(g.num_nodes, bool))
    folded = est(g, folded_norm=np.array([True, False, False, False, False]))
    assert folded.saved_at_backward - plain.saved_at_backward == rb(C * 4)
    assert guess_folded_norm(g).tolist() == [True, False, False, False, False]


def test_allocator_and_context_terms():
    e = est(cnn(), context="lazy")
    assert e.device_used == e.reserved + CONTEXT_BYTES["lazy"]
    assert e.reserved - e.allocated == pytest.approx(e.allocator_overhead)
    assert e.allocator_overhead >= 0
    assert est(cnn(), context=123.0).context == 123.0
    assert e.workspace >= CUBLAS_WORKSPACE
    terms = (e.weights + e.grads + e.optimizer_state + e.activations_saved + e.transient_peak
             + e.workspace)
    assert terms == pytest.approx(e.allocated)


def test_grads_set_to_none():
    kept = est(cnn(), grads_set_to_none=False, optimizer="sgd-momentum")
    assert kept.grads == pytest.approx(sum(rb(x * 4) for x in (W_CONV, W_FC)))


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        est(cnn(), precision="int8")
    with pytest.raises(ValueError):
        est(cnn(), optimizer="lamb")
    with pytest.raises(ValueError):
        est(cnn(), batch_size=0)


def test_decay_sequence_is_timms():
    assert censored.decay_sequence()[:8] == [512, 384, 256, 192, 128, 96, 64, 48]
    assert censored.decay_sequence()[-4:] == [4, 3, 2, 1]
    assert censored.previous_size(384) == 512 and censored.previous_size(512) is None
    assert censored.previous_size(3) == 4 and censored.previous_size(100) is None


def test_censored_check_counts_both_sides(tmp_path):
    path = tmp_path / "tiny@16.onnx"
    path.write_bytes(ob.to_bytes(ob.cnn_model(batch="N", hw=16)))
    skeletons = censored.load_skeletons(str(tmp_path))
    assert skeletons == {("tiny", 16): str(path)}
    rows = [{"model": "tiny", "img_size": 16, "batch_size": b} for b in (512, 96)]
    rows.append({"model": "absent", "img_size": 16, "batch_size": 8})
    settings = {"precision": "fp32", "optimizer": "sgd", "context": 0.0}
    small = censored.censored_check(rows, skeletons, capacity_bytes=1 * MiB, settings=settings)
    big = censored.censored_check(rows, skeletons, capacity_bytes=2**40, settings=settings)
    assert small["summary"]["rows_checked"] == 2 and small["summary"]["rows_without_graph"] == 1
    assert small["summary"]["fits_side_share"] == 0 and big["summary"]["fits_side_share"] == 1
    assert small["summary"]["nofit_side_share"] == 1 and big["summary"]["nofit_side_share"] == 0
    assert small["summary"]["reduced_rows"] == 1


def test_autocast_dtype_rules():
    # Conv (half) -> LayerNorm (fp32 on an fp32 copy it keeps) -> Softmax (fp32 result, keeps
    # it, no input copy) -> GlobalAveragePool (keeps its fp32 input) -> Gemm (keeps a half copy)
    g = make_graph([("Conv", [], C, W_CONV), ("LayerNormalization", [0], C, 8),
                    ("Softmax", [1], C, 0), ("GlobalAveragePool", [2], P, 0),
                    ("Gemm", [3], K, W_FC)], input_elems=X)
    e = est(g, precision="amp-fp16")
    assert e.saved_at_backward == (rb(X * 4) + rb(X * 2) + rb(C * 4) + rb(C * 4) + rb(P * 2)
                                   + rb(K * 2))


def test_gated_unit_is_not_one_fused_op():
    # conv -> Split(x1, x2) -> Sigmoid(x2) -> Mul(x2, .) = SiLU -> Mul(x1, silu): a GLU. The
    # SiLU fuses; the gate is a separate Mul that keeps the SiLU output (PyTorch's GluMlp).
    g = make_graph([("Conv", [], 2 * C, W_CONV), ("Split", [0], 2 * C, 0),
                    ("Sigmoid", [1], C, 0), ("Mul", [1, 2], C, 0), ("Mul", [1, 3], C, 0),
                    ("GlobalAveragePool", [4], P, 0), ("Gemm", [5], K, W_FC)], input_elems=X)
    g.n_out[1] = 2
    e = est(g)
    assert e.saved_at_backward == (rb(X * 4) + rb(2 * C * 4) + rb(C * 4) + rb(C * 4)
                                   + rb(P * 4) + rb(K * 4))
    w = walk(g)
    assert w.fused[3] and not w.fused[4]


def test_fitting_batch_is_the_largest_power_of_two_under_the_budget():
    g = featurize("data/sample/onnx/resnet10t@64.onnx", 8)
    for budget_gb in (1.8, 3.0, 24.0):
        got = fitting_batch(g, "amp-fp16", "adamw", budget_gb * 1e9)
        used = lambda b: training_memory(g, "amp-fp16", "adamw", batch_size=b).device_used  # noqa: E731
        assert got >= 1 and used(got) <= budget_gb * 1e9 < used(2 * got), budget_gb
    assert fitting_batch(g, "amp-fp16", "adamw", 1e3) == 0
    assert fitting_batch(g, "amp-fp16", "adamw", 1e15, limit=64) == 64


def test_fused_attention_keeps_scores_off_the_device():
    """Flash attention never writes the seq x seq scores: memory drops by their bytes, and what
    backward keeps instead is one fp32 value per query row."""
    g = featurize(ob.transformer_block(seq=64), batch_size=8)
    fused, eager = (training_memory(g, "fp32", "sgd", fused_attention=f) for f in (True, False))
    softmax, lse = 8 * 64 * 64 * 4, 8 * 64 * 4  # what eager backward keeps; what flash keeps instead
    assert eager.saved_at_backward - fused.saved_at_backward == softmax - lse
    assert fused.allocated < eager.allocated and fused.allocated >= fused.floor


def test_fitting_batch_in_eager_attention_fits_fewer_samples():
    """The scores eager attention keeps take memory per sample: the same budget fits fewer."""
    g = featurize(ob.transformer_block(seq=512), batch_size=8)
    budget = training_memory(g, "amp-fp16", "sgd", batch_size=64, fused_attention=False).device_used * 1.01
    eager = fitting_batch(g, "amp-fp16", "sgd", budget, fused_attention=False)
    assert eager == 64 and fitting_batch(g, "amp-fp16", "sgd", budget) > eager


def test_grad_accum_keeps_gradients_all_step():
    g = cnn()
    one, four = est(g), est(g, grad_accum=4)
    assert four.allocated >= one.allocated
    assert four.grads == pytest.approx(est(g, grads_set_to_none=False).grads)


def test_recompute_keeps_block_outputs_only():
    """Checkpointing every residual block saves less for backward than keeping every activation,
    never less than the data input, and never more than without it."""
    g = featurize(ob.residual_chain(blocks=6), batch_size=8192)  # activations above the workspaces
    plain, ckpt = (training_memory(g, "fp32", "adam", recompute=r) for r in (False, True))
    assert ckpt.allocated < plain.allocated and ckpt.allocated >= ckpt.floor
    assert ckpt.saved_at_backward < plain.saved_at_backward
    segments = checkpoint_segments(walk(g))
    # a segment per residual block; the first block's join with the graph input itself is not
    # seen (the walk lists the graph input only for nodes fed by nothing else): it joins the second
    assert list(np.bincount(segments)) == [8, 4, 4, 4, 4]


def blocks_reading_a_mask(blocks: int, mask: bool) -> Graph:
    """An embedding, then ``blocks`` residual blocks (a weighted product, optionally plus a mask
    computed from the data input alone, added back to the stream), then a head."""
    e = 64 * B
    nodes: list[tuple] = [("Gemm", [], e, 64), ("Where", [], e, 0)]
    stream = 0
    for _ in range(blocks):
        nodes.append(("Gemm", [stream], e, 64))
        if mask:
            nodes.append(("Add", [len(nodes) - 1, 1], e, 0))
        nodes.append(("Add", [stream, len(nodes) - 1], e, 0))
        stream = len(nodes) - 1
    nodes.append(("Gemm", [stream], K, W_FC))
    return make_graph(nodes, input_elems=e)


def test_a_mask_every_block_reads_does_not_merge_the_blocks():
    """A tensor no weight went into (a causal mask, a rotary table) is an input of every
    checkpointed block, not the stream between blocks: the blocks stay segments of their own."""
    with_mask, without = (checkpoint_segments(walk(blocks_reading_a_mask(4, m))) for m in (True, False))
    assert with_mask.max() + 1 == without.max() + 1 >= 4


def test_zero_shards_each_gpus_states_stage_by_stage():
    """ZeRO over 4 GPUs: stage 1 keeps a quarter of the optimizer state, 2 of the gradients too,
    3 of the weights too, with two layers gathered whole; the floor is this GPU's share."""
    g, w = cnn(), (W_CONV + W_FC) * 4.0
    plain, *staged = (est(g, optimizer="adam", grads_set_to_none=False, zero=z, shards=4) for z in (0, 1, 2, 3))
    assert [e.floor for e in (plain, *staged)] == pytest.approx([4 * w, 2.5 * w, 1.75 * w, w])
    quarter = sum(rb(x * 4 / 4) for x in (W_CONV, W_FC))  # a quarter of each tensor, in allocator blocks
    assert [e.optimizer_state for e in staged] == pytest.approx([2 * quarter] * 3)
    assert staged[1].grads == pytest.approx(quarter) and staged[0].grads == plain.grads
    assert staged[2].weights == pytest.approx(quarter + rb(2 * max(W_CONV, W_FC) * 4))
    assert plain.device_used >= staged[0].device_used >= staged[1].device_used
    assert est(g, optimizer="adam", zero=3, shards=1).floor == pytest.approx(plain.floor)  # one GPU: nothing shared
    with pytest.raises(ValueError, match="zero must be 0-3"):
        est(g, zero=4, shards=2)


def test_optimizer_temporaries_follow_torch_optims_code():
    # foreach SGD updates the momentum buffer and (Nesterov) the gradient in place: no temporary;
    # Adam holds one list of sqrt(v); a single-tensor loop one parameter's copy at a time
    big = 1 << 20  # a 4 MiB weight beside activations of a few KiB: the optimizer sets the peak
    g = make_graph([("Gemm", [], K, big), ("Relu", [0], K, 0)], input_elems=X)
    w = rb(big * 4)
    small = 4 * MiB  # activations, loss, workspace rounding: far below one more weight copy
    sgd, adam = (est(g, optimizer=opt, batch_size=1) for opt in ("sgd-momentum", "adam"))
    assert 3 * w <= sgd.allocated - CUBLAS_WORKSPACE < 3 * w + small
    assert 5 * w <= adam.allocated - CUBLAS_WORKSPACE < 5 * w + small
    single = est(g, optimizer="sgd-momentum", batch_size=1, foreach=False)
    assert single.allocated - sgd.allocated == pytest.approx(w, rel=1e-3)


def test_the_replayed_allocators_reserved_never_falls_as_the_batch_grows():
    # the packed estimate can fall by a few percent between neighbouring batches (a phase's peak
    # moving to a step with less segment slack); the replay's envelope never does
    g = featurize("data/sample/onnx/convnext_atto@64.onnx", 8)
    reserved = [training_memory(g, "amp-bf16", "adamw", batch_size=b, allocator="replay").reserved
                for b in range(1, 41)]
    assert all(a <= b for a, b in itertools.pairwise(reserved)), reserved
    e = training_memory(g, "amp-bf16", "adamw", batch_size=32, allocator="replay")
    assert e.allocated <= e.reserved <= 1.5 * e.allocated
    with pytest.raises(ValueError, match="allocator"):
        training_memory(g, "amp-bf16", "adamw", allocator="exact")
