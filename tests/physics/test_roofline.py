"""The roofline floor on tiny hand-built graphs whose FLOPs and bytes are worked out by hand."""
from __future__ import annotations

import time

import numpy as np
import pytest

from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics.roofline import (FEATURE_NAMES, OPTIMIZER_BYTES, WINOGRAD_FACTOR, device_rates, node_features, roofline,
                                         runs_as)
from trappm_ray.physics.units import FREE, SOFTMAX, TENSOR, VECTOR, attention_scores, misaligned, node_classes
from tests import onnx_builders as ob

RTX3090 = devices.get("rtx3090")  # 35.6 TFLOPS FP32, 71 FP16 tensor (FP32 accumulate), 936 GB/s


def cnn(batch: int = 4, hw: int = 16):
    return featurize(ob.cnn_model(hw=hw), batch_size=batch)


def matmul(batch: int = 8, m: int = 512, k: int = 1024, n: int = 1024):
    return featurize(ob.huge_matmul_model(m, k, n), batch_size=batch)


def test_node_classes_of_the_cnn():
    assert node_classes(cnn()).tolist() == [TENSOR, VECTOR, VECTOR, FREE, TENSOR]  # Flatten is a view


def test_depthwise_conv_runs_on_the_vector_units():
    g = featurize(ob.conv_model(cin=4, cout=4, group=4), batch_size=2)
    assert node_classes(g).tolist() == [VECTOR]
    g = featurize(ob.conv_model(cin=16, cout=16, group=2), batch_size=2)  # 8 channels per group
    assert node_classes(g).tolist() == [TENSOR]


def test_flops_and_bytes_by_hand_at_fp32():
    b, hw = 4, 16
    exp = ob.cnn_expect(b, hw)
    est = roofline(cnn(b, hw), RTX3090, "fp32", "infer", restore_folded_bn=False)
    conv_out = exp["out_elems"]["Conv"]
    # 2 FLOPs per MAC; a 3x3 stride-1 Conv off the tensor cores counts Winograd's quarter
    assert est.flops[0] == pytest.approx(2 * exp["macs"]["Conv"] / WINOGRAD_FACTOR)
    assert est.flops[1] == pytest.approx(exp["macs"]["Relu"])  # one op per element
    # Conv: input + output + weights, 4 bytes each; Relu: reads and writes the Conv's output
    assert est.bytes[0] == pytest.approx(4 * (b * 3 * hw * hw + conv_out + exp["params"]["Conv"]))
    assert est.bytes[1] == pytest.approx(8 * conv_out)
    assert est.flops[3] == est.bytes[3] == 0.0  # Flatten
    assert est.memory_ms[1] == pytest.approx(8 * conv_out / 936e9 * 1e3)
    assert est.compute_ms[0] == pytest.approx(est.flops[0] / 35.6e12 * 1e3)
    amp = roofline(cnn(b, hw), RTX3090, "amp-fp16", "infer", restore_folded_bn=False)
    assert amp.flops[0] == pytest.approx(2 * exp["macs"]["Conv"])  # tensor cores: no Winograd
    strided = featurize(ob.conv_model(cin=4, cout=6, k=3, group=1, hw=9), batch_size=2)
    fp64 = roofline(strided, RTX3090, "fp64", "infer")
    assert fp64.flops[0] == pytest.approx(2 * strided.macs[0])  # no Winograd in double
    assert est.node_ms == pytest.approx(np.maximum(est.compute_ms, est.memory_ms))
    assert est.total_ms == pytest.approx(est.node_ms.sum())


def test_compute_bound_matmul_and_memory_bound_relu():
    g = matmul()
    est = roofline(g, RTX3090, "amp-fp16", "infer")
    assert est.compute_ms[0] > est.memory_ms[0]  # 2*m*k*n FLOPs on m*k + m*n + k*n elements
    assert est.memory_ms[1] > est.compute_ms[1]  # one op per element it reads and writes
    feats = node_features(g, RTX3090, "amp-fp16")
    assert feats.shape == (2, len(FEATURE_NAMES)) and feats.dtype == np.float32
    intensity, bound = FEATURE_NAMES.index("log2_intensity_over_ridge"), FEATURE_NAMES.index("compute_bound")
    assert feats[0, intensity] > 0 > feats[1, intensity]
    assert feats[:, bound].tolist() == [1.0, 0.0]
    assert 0.5 < est.compute_bound_share <= 1.0


def test_precision_sets_the_peak_and_the_element_size():
    g = matmul()
    fp32 = roofline(g, RTX3090, "fp32", "infer")
    amp = roofline(g, RTX3090, "amp-fp16", "infer")
    assert fp32.compute_ms[0] / amp.compute_ms[0] == pytest.approx(71 / 35.6)  # tensor cores
    assert fp32.compute_ms[1] == pytest.approx(amp.compute_ms[1])  # ReLU stays on vector units
    assert amp.bytes[1] == pytest.approx(fp32.bytes[1] / 2)  # half activations
    assert amp.total_ms < fp32.total_ms
    fp64 = roofline(g, RTX3090, "fp64", "infer")
    assert fp64.compute_ms[0] == pytest.approx(fp32.compute_ms[0] * 35.6 / 0.556)
    tensor, vector, bw = device_rates(RTX3090, "tf32")
    assert (tensor, vector, bw) == (pytest.approx(35.6e12), pytest.approx(35.6e12), pytest.approx(936e9))
    assert device_rates(devices.get("p100-pcie-16gb"), "fp16")[1] == pytest.approx(18.7e12)
    # the tensor-class rates at fp32: TF32 (A100 convolutions), CDNA's FP32 matrix cores (MI100)
    assert device_rates(devices.get("a100-pcie-40gb"), "fp32")[:2] == (pytest.approx(156e12), pytest.approx(19.5e12))
    assert device_rates(devices.get("mi100"), "fp32")[:2] == (pytest.approx(46.2e12), pytest.approx(23.1e12))


def test_autocast_keeps_the_residual_stream_in_fp32_and_casts_it_for_each_gemm():
    # LayerNorm (fp32 result) -> fc1 (half, on a half copy) -> relu -> fc2 (half) -> n + o: fp32
    # (the wider input wins), which the next block's fc1 copies to half again
    g = featurize(ob.residual_chain(blocks=2, d=32, norm=True), batch_size=64)
    amp, half = (roofline(g, RTX3090, p, "infer") for p in ("amp-fp16", "fp16"))
    assert g.ops[:5] == ["LayerNormalization", "MatMul", "Relu", "MatMul", "Add"]
    stream = 64 * 32
    assert amp.cast_ms[1] == pytest.approx(stream * (4 + 2) / 936e9 * 1e3)  # read fp32, write half
    assert amp.cast_ms[5] == pytest.approx(amp.cast_ms[1]) and amp.cast_ms[[0, 2, 3, 4, 6, 7, 8]].sum() == 0
    assert amp.bytes[4] == pytest.approx(stream * (4 + 2 + 4))  # reads n and o, writes fp32
    assert half.bytes[4] == pytest.approx(stream * (4 + 2 + 2)) and not half.cast_ms.any()  # no casts, no promotion
    assert amp.node_ms[1] == pytest.approx(max(amp.compute_ms[1], amp.memory_ms[1]) + amp.cast_ms[1])


def test_fp32_convolutions_may_use_tf32_but_matrix_products_do_not():
    # PyTorch's defaults: cudnn.allow_tf32 True, cuda.matmul.allow_tf32 False (>= 1.12)
    a100, mi100 = devices.get("a100-pcie-40gb"), devices.get("mi100")
    conv, gemm = cnn(), matmul(m=64, k=256, n=1024)  # the CNN's Conv; a MatMul of even sizes
    assert (conv.ops[0], gemm.ops[0]) == ("Conv", "MatMul")

    def peaks(precision: str, device=a100) -> tuple:
        return roofline(conv, device, precision, "infer").peak[0], roofline(gemm, device, precision, "infer").peak[0]
    assert peaks("fp32") == (pytest.approx(156e12), pytest.approx(19.5e12))
    assert peaks("tf32") == (pytest.approx(156e12), pytest.approx(156e12))
    fp32, tf32 = (roofline(gemm, a100, p, "infer") for p in ("fp32", "tf32"))
    assert fp32.compute_ms[0] == pytest.approx(tf32.compute_ms[0] * 156 / 19.5)
    # rocBLAS runs FP32 GEMMs on the matrix cores
    assert peaks("fp32", mi100) == (pytest.approx(46.2e12), pytest.approx(46.2e12))
    # both flags off (the campaign's first fp32 rows): convolutions on the FP32 units too
    assert peaks("fp32-strict") == (pytest.approx(19.5e12), pytest.approx(19.5e12))
    strict, default = (roofline(conv, a100, p, "infer").compute_ms[0] for p in ("fp32-strict", "fp32"))
    assert strict > default


@pytest.mark.parametrize("build", [lambda b: cnn(b), lambda b: featurize(ob.transformer_block(), batch_size=b)])
@pytest.mark.parametrize("precision", ["fp32", "amp-fp16"])
def test_monotone_in_batch_size(build, precision):
    totals = [roofline(build(b), RTX3090, precision, "train").total_ms for b in (1, 2, 8, 32)]
    assert all(a < b for a, b in zip(totals, totals[1:]))


@pytest.mark.parametrize("precision", ["fp32", "amp-fp16", "fp16"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZER_BYTES))
def test_training_costs_more_than_inference(precision, optimizer):
    g = cnn(8)
    infer = roofline(g, RTX3090, precision, "infer")
    train = roofline(g, RTX3090, precision, "train", optimizer)
    assert train.total_ms >= infer.total_ms > 0
    assert train.backward_ms == pytest.approx(2 * train.forward_ms)
    per_param = OPTIMIZER_BYTES[optimizer] + (8 if precision.startswith("amp") else 0)
    assert train.optimizer_ms == pytest.approx(g.params.sum() * per_param / 936e9 * 1e3)
    assert infer.backward_ms == infer.optimizer_ms == 0.0


def test_folded_batchnorm_is_put_back():
    g = cnn()
    with_bn, without = (roofline(g, RTX3090, "fp32", "infer", restore_folded_bn=r) for r in (True, False))
    conv_out = g.out_elems[0]
    assert with_bn.total_ms - without.total_ms == pytest.approx(8 * conv_out / 936e9 * 1e3)


def test_fused_attention_keeps_scores_on_chip():
    g = featurize(ob.transformer_block(seq=64), batch_size=4)
    names = ["q", "k", "kt", "scores", "softmax", "attn", "add"]
    assert [names[i] for i in np.flatnonzero(attention_scores(g))] == ["scores", "softmax"]
    fused = roofline(g, RTX3090, "fp32", "infer")
    eager = roofline(g, RTX3090, "fp32", "infer", fused_attention=False)
    scores = 4 * 64 * 64  # elements of q @ k^T and of the softmax
    # eager writes the scores, reads and writes them in softmax, reads them in p @ x
    assert eager.bytes.sum() - fused.bytes.sum() == pytest.approx(4 * scores * 4)
    assert fused.flops.sum() == pytest.approx(eager.flops.sum())
    assert roofline(g, RTX3090, "fp32", "infer", compiled=True).total_ms <= fused.total_ms


def test_masked_attention_is_fused_too():
    """Scaling, a causal Where and an additive padding mask (smaller than the scores) between
    q @ k^T and the Softmax, as Hugging Face's BERT and GPT-2 export them: still one fused kernel."""
    g = featurize(ob.masked_attention(seq=64), batch_size=4)
    names = ["q", "k", "kt", "scores", "scale", "causal", "pad", "softmax", "attn"]
    assert [names[i] for i in np.flatnonzero(attention_scores(g))] == ["scores", "scale", "causal", "pad", "softmax"]


def test_megatron_attention_stores_the_scores_once():
    """Megatron-LM: q @ k^T writes the half-precision scores; one kernel scales, masks and
    softmaxes them (the Div, Where and Add launch none); dropout rewrites the probabilities."""
    g = featurize(ob.masked_attention(seq=64), batch_size=4)
    megatron, eager = (roofline(g, RTX3090, "amp-fp16", "infer", fused_attention=f) for f in (SOFTMAX, False))
    scale, causal, pad, softmax = 4, 5, 6, 7
    assert megatron.flops[[scale, causal, pad]].tolist() == megatron.bytes[[scale, causal, pad]].tolist() == [0, 0, 0]
    scores = 4 * 64 * 64
    assert megatron.bytes[softmax] == pytest.approx((4 * 2 + 1) * scores)
    assert megatron.bytes[3] == pytest.approx(eager.bytes[3])  # the scores written as eagerly
    assert roofline(g, RTX3090, "amp-fp16", "infer").total_ms < megatron.total_ms < eager.total_ms


@pytest.mark.parametrize("n,odd", [(1001, True), (1000, False), (1024, False)])
def test_odd_matrix_products_run_off_the_tensor_cores(n, odd):
    """An odd inner or output dimension (GPT-2's 50,257-word head) leaves rows cuBLAS cannot load
    as vectors: the product's peak is the vector units', in every precision."""
    g = matmul(batch=2, m=64, k=256, n=n)
    assert misaligned(g).tolist() == [odd, False]
    tensor, vector, _ = device_rates(RTX3090, "amp-fp16")
    assert roofline(g, RTX3090, "amp-fp16").peak[0] == (vector if odd else tensor)
    # attention's own products are a fused kernel's, whatever the sequence length
    assert not misaligned(featurize(ob.transformer_block(seq=63), batch_size=2)).any()


def test_bad_inputs_are_refused():
    g = cnn()
    with pytest.raises(ValueError, match="precision"):
        roofline(g, RTX3090, "int8")
    with pytest.raises(ValueError, match="mode"):
        roofline(g, RTX3090, mode="serve")
    with pytest.raises(ValueError, match="optimizer"):
        roofline(g, RTX3090, optimizer="lion")
    with pytest.raises(ValueError, match="bandwidth"):
        roofline(g, devices.get("intel-r-xeon-r-processor-t1"), "fp32")


def test_cpu_uses_its_fp32_peak_for_everything():
    tensor, vector, bw = device_rates(devices.get("i9-10940x"), "amp-fp16")
    assert tensor == vector == pytest.approx(2.957e12) and bw == pytest.approx(94e9)


def test_fast_on_a_thousand_nodes():
    g = featurize(ob.many_nodes_model(1000), batch_size=8)
    roofline(g, RTX3090)
    t0 = time.perf_counter()
    roofline(g, RTX3090)
    assert time.perf_counter() - t0 < 0.5  # ~5 ms on an idle core; generous for loaded CI


def test_tf32_runs_as_fp32_where_no_tf32_tensor_cores_are():
    assert runs_as(devices.get("t4"), "tf32") == "fp32"
    assert runs_as(devices.get("v100-sxm2-16gb"), "tf32") == "fp32"
    assert runs_as(devices.get("a100-sxm4-80gb"), "tf32") == "tf32"
    assert runs_as(devices.get("t4"), "amp-fp16") == "amp-fp16"
