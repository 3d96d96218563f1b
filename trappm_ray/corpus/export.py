"""Weight-free model construction and the legacy ONNX export shared by every model source.

Models are built with their parameters on the meta device (no memory, no initialisation cost:
the initialisers of a 1B-parameter model take minutes on one core), while buffers are computed
for real (index tables, masks, running statistics), because the export reads them. Torch's
legacy TorchScript exporter cannot trace a model on the meta device (its convolution meta kernels
reject traced sizes), so before export each meta parameter gets uninitialised memory filled with
distinct random values; this replaces the initialisation, not the allocation. The exported graph
does not depend on weight values (they are stripped afterwards), only on their shapes and on
their being distinct: equal tensors would be merged by the exporter's de-duplication.
torch is imported lazily.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import warnings

import onnx

from trappm_ray.graph.onnx_io import strip_weights

log = logging.getLogger(__name__)

OPSET = 17
# Weights are stripped to typed graph inputs; small tensors stay because shape inference reads
# them (Reshape targets, Slice bounds).
KEEP_INITIALIZER_MAX_ELEMENTS = 64
# Above this many bytes of weights, torch writes external data (protobuf's 2 GB cap): export to a
# temporary folder and keep the protobuf only.
_IN_MEMORY_MAX_BYTES = 1_500_000_000


@contextlib.contextmanager
def meta_parameters():
    """Within the block, every parameter a module registers is moved to the meta device.

    Buffers stay where they were computed; ``nn.init`` calls on meta parameters are free.
    """
    import torch

    original = torch.nn.Module.register_parameter

    def register(module, name, param):
        original(module, name, param)
        p = module._parameters.get(name)
        if p is not None and p.device.type != "meta":
            module._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    torch.nn.Module.register_parameter = register
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original


def materialize(model, seed: int = 0, expanded: bool = False) -> int:
    """Give every meta parameter (and meta buffer) CPU memory with distinct random values.

    Tied parameters stay tied. Float values are drawn in [0.5, 1.5) (positive, so that variances
    stay valid); other dtypes get small positive integers.

    Args:
        model: a module built under :func:`meta_parameters` (or plain: a no-op then).
        seed: torch seed for the values.
        expanded: give each parameter one random scalar broadcast to its shape (stride 0, no
            memory); only for exports that keep no weight values (``export_params=False``).

    Returns:
        The number of parameter elements.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    done: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None and p.device.type == "meta":
                if id(p) not in done:  # tied weights are one Parameter object: keep them tied
                    value = _random_like(p, gen, expanded)
                    done[id(p)] = torch.nn.Parameter(value, requires_grad=p.requires_grad and not expanded)
                module._parameters[name] = done[id(p)]
        for name, b in list(module._buffers.items()):
            if b is not None and b.device.type == "meta":
                log.warning("meta buffer %s.%s filled with random values", type(module).__name__, name)
                if id(b) not in done:
                    done[id(b)] = _random_like(b, gen)
                module._buffers[name] = done[id(b)]
    return sum(p.numel() for p in model.parameters())


def _random_like(t, gen, expanded: bool = False):
    import torch

    if expanded:
        return _random_like(torch.empty((), dtype=t.dtype, device="meta"), gen).expand(t.shape)
    if t.is_floating_point():
        return torch.rand(t.shape, generator=gen, dtype=t.dtype).add_(0.5)
    return torch.randint(1, 8, t.shape, generator=gen, dtype=t.dtype)


def jitter_real_tensors(model, seed: int = 0) -> None:
    """Add < 1e-3 of noise to every real float parameter and buffer (keeps them distinct).

    Random initialisation leaves many tensors identical (zero-init gammas, LayerNorm ones); the
    exporter would merge those into shared weights and add Identity nodes.
    """
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            broadcast = t.numel() > 1 and 0 in t.stride()  # materialize(expanded=True)
            if t.is_floating_point() and t.device.type != "meta" and not broadcast:
                t.add_(torch.rand(t.shape, generator=gen, dtype=t.dtype) * 1e-3)


def export_legacy(model, args: tuple, input_names: list[str], dynamic_axes: dict,
                  output_names: list[str] | None = None, opset: int = OPSET,
                  export_params: bool = True) -> bytes:
    """Export with torch's legacy exporter and strip the weights; returns the ONNX bytes.

    Args:
        model: an eval-mode module with real (CPU) parameters.
        args: example inputs.
        input_names, output_names, dynamic_axes: as for ``torch.onnx.export``.
        opset: ONNX opset.
        export_params: False leaves every tensor above ``KEEP_INITIALIZER_MAX_ELEMENTS``
            elements out of the file (typed graph inputs, as stripping does) and never copies
            their values: for models whose weights would not fit in memory twice. Small tensors,
            among them the constants the exporter folded (Reshape targets), keep their values.
    """
    import torch

    output_names = output_names or ["output"]
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters()) if export_params else 0
    kwargs = {"dynamo": False, "opset_version": opset, "input_names": input_names,
              "output_names": output_names, "dynamic_axes": dynamic_axes}
    with (warnings.catch_warnings(), torch.no_grad(), _small_initializers_only(not export_params),
          _decomposed_rms_norm()):
        warnings.simplefilter("ignore")
        if nbytes < _IN_MEMORY_MAX_BYTES:
            buf = io.BytesIO()
            torch.onnx.export(model, args, buf, **kwargs)
            proto = onnx.load_from_string(buf.getvalue())
        else:
            with tempfile.TemporaryDirectory(prefix="trappm-export-") as tmp:
                path = os.path.join(tmp, "model.onnx")
                torch.onnx.export(model, args, path, **kwargs)
                proto = onnx.load(path, load_external_data=False)
                _drop_external_refs(proto)
    return strip_weights(proto, KEEP_INITIALIZER_MAX_ELEMENTS).SerializeToString()


def export_dynamo(model, args: tuple, input_names: list[str], dynamic_batch: bool = True,
                  output_names: list[str] | None = None) -> bytes:
    """Export with torch's dynamo exporter (``torch.export``) and strip the weights.

    Where the legacy exporter cannot trace an op (``aten::col2im`` and anti-aliased resizing at
    opset 17, ``unfold`` of a padded tensor, convolutions whose kernel shape is computed), the
    dynamo exporter still can: it traces with fake tensors, so it sees every shape, and it
    specialises Python control flow on those shapes instead of emitting ``If`` nodes.

    Args:
        model: an eval-mode module with real (CPU) parameters (broadcast ones too:
            ``materialize(expanded=True)``; their values are never copied, see below).
        args: example inputs; their first dimension is the batch.
        input_names, output_names: graph input/output names (one output by default).
        dynamic_batch: a symbolic batch axis on every input; False exports at the batch of
            ``args`` (for models whose ops take the batch as an attribute: CondConv's groups).
    """
    import torch

    output_names = output_names or ["output"]
    shapes = None
    if dynamic_batch:
        batch = torch.export.Dim("batch", min=1, max=1 << 16)
        shapes = tuple({0: batch} for _ in args)
    with warnings.catch_warnings(), torch.no_grad(), _decomposed_rms_norm():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, args, dynamo=True, input_names=input_names,
                                    output_names=output_names, dynamic_shapes=shapes,
                                    optimize=True, verbose=False)
    _weights_to_inputs(program.model.graph)
    buf = io.BytesIO()
    program.save(buf)
    proto = onnx.load_from_string(buf.getvalue())
    _drop_zero_conv_bias(proto)
    return strip_weights(proto, KEEP_INITIALIZER_MAX_ELEMENTS).SerializeToString()


def _drop_zero_conv_bias(proto: onnx.ModelProto) -> None:
    """Remove the zero bias that the dynamo exporter gives a bias-free convolution whose weight
    is computed (CondConv's per-sample kernels), in place.

    Its translation of ``aten::convolution`` without bias writes ``Expand(0, [out_channels])``
    as the bias: a tensor of batch x channels zeros that the featurizer would count as computed
    weights. The model has no bias, so the graph gets none; the nodes that only fed it go too.
    """
    from onnx import numpy_helper

    g = proto.graph
    scalars = {t.name: t for t in g.initializer if not t.dims}
    scalars.update({n.output[0]: a.t for n in g.node if n.op_type == "Constant"
                    for a in n.attribute if a.name == "value" and not a.t.dims})
    producer = {o: n for n in g.node for o in n.output}
    dropped = 0
    for node in g.node:
        bias = producer.get(node.input[2]) if node.op_type == "Conv" and len(node.input) > 2 else None
        zero = bias is not None and bias.op_type == "Expand" and bias.input[0] in scalars
        if zero and not numpy_helper.to_array(scalars[bias.input[0]]).any():
            del node.input[2]
            dropped += 1
    if not dropped:
        return
    outputs = {o.name for o in g.output}
    while True:  # remove what fed only the dropped biases
        used = outputs | {x for n in g.node for x in n.input}
        dead = [n for n in g.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
    used = {x for n in g.node for x in n.input} | outputs
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    log.debug("dropped %d zero convolution biases", dropped)


def _weights_to_inputs(graph) -> None:
    """Turn the large initializers of an ONNX IR graph into typed inputs without values, in place.

    As ``strip_weights`` does afterwards, but before serialisation: saving would copy every
    weight (a broadcast parameter into a full tensor), and above 2 GB protobuf cannot hold them.
    """
    for name, value in list(graph.initializers.items()):
        tensor = value.const_value
        if tensor is not None and tensor.size > KEEP_INITIALIZER_MAX_ELEMENTS:
            graph.initializers.pop(name)
            value.const_value = None
            graph.inputs.append(value)


@contextlib.contextmanager
def _decomposed_rms_norm():
    """Within the block, timm's RMSNorm layers use timm's own composition of elementwise ops
    instead of torch's ``rms_norm``, which the legacy exporter cannot export (``aten::rms_norm``).
    The graph computes the same function; only the ONNX spelling differs."""
    import sys

    fast_norm, norm = sys.modules.get("timm.layers.fast_norm"), sys.modules.get("timm.layers.norm")
    patches = []
    if fast_norm is not None and hasattr(fast_norm, "has_torch_rms_norm"):  # older timm: no such path
        patches.append((fast_norm, "has_torch_rms_norm", False))
        if norm is not None and hasattr(norm, "rms_norm"):
            patches.append((norm, "rms_norm", fast_norm.rms_norm))
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    for mod, name, value in patches:
        setattr(mod, name, value)
    try:
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


@contextlib.contextmanager
def _small_initializers_only(active: bool):
    """Within the block, the legacy exporter writes only small initializers.

    Its last pass over the initializers (de-duplication) gets the small ones only; the others
    then stay typed graph inputs without values, as ``export_params=False`` leaves every one.
    """
    import torch

    if not active:
        yield
        return
    original = torch._C._jit_pass_onnx_deduplicate_initializers

    def small_only(graph, params_dict, is_train):
        small = {k: v for k, v in params_dict.items() if v.numel() <= KEEP_INITIALIZER_MAX_ELEMENTS}
        return original(graph, small, is_train)

    torch._C._jit_pass_onnx_deduplicate_initializers = small_only
    try:
        yield
    finally:
        torch._C._jit_pass_onnx_deduplicate_initializers = original


def _drop_external_refs(proto: onnx.ModelProto) -> None:
    """Turn large external-data initializers into typed inputs before their files disappear."""
    moved = [t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    keep = [t for t in proto.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(keep)
    proto.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in moved)


__all__ = [
    "KEEP_INITIALIZER_MAX_ELEMENTS",
    "OPSET",
    "export_dynamo",
    "export_legacy",
    "jitter_real_tensors",
    "materialize",
    "meta_parameters",
]
