"""Model zoo: timm architectures, their families, and weight-stripped ONNX skeletons.

One export per (architecture, resolution) with a dynamic batch axis; graphs for other batch
sizes are derived from the skeleton by shape re-inference (see :mod:`trappm_ray.graph.featurize`).
torch and timm are imported lazily so that the featurizer and the service never need them.
"""
from __future__ import annotations

import contextlib
import re
import warnings
from dataclasses import dataclass

import onnx

from trappm_ray.corpus.export import KEEP_INITIALIZER_MAX_ELEMENTS
from trappm_ray.graph.onnx_io import strip_weights

# The TraPPM paper's eleven families, matched as name prefixes after vendor prefixes are removed.
PAPER_FAMILIES = ("convnext", "densenet", "efficientnet", "mnasnet", "mobilenet", "poolformer",
                  "resnet", "swin", "vgg", "visformer", "vit")
# Further families widen the unlabeled corpus (architecture diversity is what the GAE learns from).
OTHER_FAMILIES = ("regnet", "resnext", "rexnet", "ghostnet", "dla", "dpn", "hrnet", "inception",
                  "xception", "deit", "beit", "cait", "coat", "convmixer", "mixer", "levit",
                  "efficientformer", "edgenext", "fastvit", "repvgg", "res2net", "resnest",
                  "selecsls", "tinynet", "lcnet", "mixnet", "cspresnet", "cspdarknet", "darknet",
                  "gernet", "nf", "maxvit", "coatnet", "pvt", "twins", "crossvit", "pit", "xcit",
                  "efficientvit", "tiny_vit", "hgnet", "mobilevit", "mobileone", "repghost", "convit",
                  "vovnet", "skresnet", "seresnet", "seresnext", "ecaresnet", "davit", "focalnet",
                  "gcvit", "nest", "tnt", "volo", "sequencer", "inception_next", "starnet", "eva",
                  "hardcorenet", "fbnet", "spnasnet", "semnasnet", "lambda", "botnet", "halonet")
_VENDOR_PREFIX = re.compile(r"^(tf_|gluon_|legacy_|ese_|dm_|timm_)")
_KNOWN = sorted(PAPER_FAMILIES + OTHER_FAMILIES, key=len, reverse=True)

# Architectures above this many parameters are skipped: their export alone needs several GB and
# minutes on a CPU, and a weight-stripped skeleton of them would still be produced the same way.
MAX_PARAMS = 400_000_000
OPSET = 17  # the same as trappm_ray.corpus.export.OPSET
EXPORTER_FIXED_BATCH = (f"torch.onnx legacy (dynamo=False), opset {OPSET}, eval mode, fixed batch "
                        "{batch} (no dynamic axis: the exporter refused one), batch re-bound by featurize")
# meta_init exports of models above this many parameters never hold their weights in memory
LEAN_ABOVE_PARAMS = 200_000_000
EXPORTER = f"torch.onnx legacy (dynamo=False), opset {OPSET}, eval mode, dynamic batch axis"
# The fallback exporter (trappm_ray.corpus.fallback): its opset is the one torch picks.
EXPORTER_DYNAMO = "torch.onnx dynamo (dynamo=True), opset {opset}, eval mode, {batch}"
# The timm the project pins (pyproject.toml); a graph exported under another one (an isolated
# older timm, for labeled architectures the pinned one no longer defines) names its version.
PINNED_TIMM = "1.0.31"


def timm_provenance(arch: str = "") -> str:
    """``", timm <version>"`` when the installed timm is not :data:`PINNED_TIMM` (else ``""``),
    and for an :data:`UNRELEASED` ``arch`` how it was built."""
    import timm

    out = "" if timm.__version__ == PINNED_TIMM else f", timm {timm.__version__}"
    if arch in UNRELEASED:
        base, overrides = UNRELEASED[arch]
        out += f", built as {base} with " + ", ".join(f"{k}={v}" for k, v in overrides.items())
    return out


def family_of(arch: str) -> str:
    """The family of a timm architecture name (e.g. ``tf_efficientnet_b0`` -> ``efficientnet``)."""
    name = _VENDOR_PREFIX.sub("", arch.lower())
    if name.startswith("vit_"):
        return "vit"
    for fam in _KNOWN:
        if fam != "vit" and name.startswith(fam):
            return fam
    m = re.match(r"[a-z]+", name)
    return m.group(0) if m else name


def list_architectures(families: tuple[str, ...] | None = None) -> list[str]:
    """timm architecture names whose family is in ``families`` (default: paper + other families)."""
    import timm

    wanted = set(families or PAPER_FAMILIES + OTHER_FAMILIES)
    return sorted(a for a in timm.list_models() if family_of(a) in wanted)


# Names in timm's published benchmark CSVs that this timm version lists under another name,
# with the same architecture (the old name's weights differ, the graph does not).
ALIASES = {
    **{f"swin_v2_cr_{v}": f"swinv2_cr_{v}" for v in (
        "tiny_224", "tiny_384", "tiny_ns_224", "small_224", "small_384", "base_224", "base_384",
        "large_224", "large_384", "huge_224", "huge_384", "giant_224", "giant_384")},
    "vit_base_patch16_224_sam": "vit_base_patch16_224",
    "vit_base_patch32_224_sam": "vit_base_patch32_224",
}


# Architectures that the installed timm still defines (an entry of the module's ``model_cfgs``
# table, under the same name) but no longer registers as a model name, with the function of
# that module that builds a ``model_cfgs`` entry; timm's benchmark CSVs measured them when
# they were registered.
UNREGISTERED = {"semobilevit_s": ("timm.models.mobilevit", "_create_mobilevit")}

# Architectures timm's benchmark CSVs measured from its development branch that no released timm
# defines (checked: 0.3.4-0.6.13, 0.9.x, 1.0.31), built as a released model with the widths the
# development definition recorded. vit_base2_patch32_256: ViT-B/32 widened to 896 with 14 heads
# (depth 12, 256 px default input), an experiment in timm's vision_transformer.py of 2021.
UNRELEASED = {"vit_base2_patch32_256": ("vit_base_patch32_224", {"embed_dim": 896, "num_heads": 14})}


def create_model(arch: str, resolution: int, device: str | None = None, **model_kwargs):
    """A randomly initialised timm model that accepts ``resolution`` x ``resolution`` images.

    Args:
        arch: timm name (deprecated names and :data:`ALIASES` resolve).
        resolution: input size in pixels.
        device: where to build it (``meta``: no memory at all), default torch's default.
        model_kwargs: further ``timm.create_model`` arguments (e.g. ``depth=...``).
    """
    import timm

    name = ALIASES.get(arch, arch)
    kwargs: dict = {"pretrained": False, **model_kwargs}
    if device is not None:
        kwargs["device"] = device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated-name notices
        if name in UNREGISTERED:
            import importlib

            module, builder = UNREGISTERED[name]
            return getattr(importlib.import_module(module), builder)(name, img_size=resolution,
                                                                     **kwargs)
        if name in UNRELEASED:
            name, overrides = UNRELEASED[name]
            kwargs.update(overrides)
        try:
            return timm.create_model(name, img_size=resolution, **kwargs)
        except TypeError:  # convolutional models take any size and have no img_size argument
            return timm.create_model(name, **kwargs)


@contextlib.contextmanager
def unfused_attention():
    """Within the block, timm models built get attention as explicit matmul + softmax instead of
    ``F.scaled_dot_product_attention``: for the models (rotary-embedding ViTs: EVA, RoPE ViTs)
    whose fused call passes arguments the legacy exporter cannot trace."""
    from timm.layers import config

    fused, experimental = config.use_fused_attn(), config.use_fused_attn(experimental=True)
    config.set_fused_attn(False)
    try:
        yield
    finally:
        config.set_fused_attn(fused, experimental=experimental)


def own_resolution(arch: str) -> int | None:
    """The input size timm's configuration of ``arch`` names (CrossViT-9 240, EfficientNet-B3
    288); None where it names none. Some models export at no other size (a fixed position
    embedding)."""
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(ALIASES.get(arch, arch))
    size = getattr(cfg, "input_size", None) if cfg is not None else None
    return int(size[-1]) if size else None


def count_params(arch: str, resolution: int) -> int:
    """Parameter count of ``arch`` without allocating its weights (meta device), or, for a
    constructor that reads its own weights' values (some of older timm's), with them."""
    import torch

    try:
        with torch.device("meta"):
            model = create_model(arch, resolution)
    except (NotImplementedError, RuntimeError) as e:
        if "meta tensor" not in str(e):
            raise
        model = create_model(arch, resolution)
    return sum(p.numel() for p in model.parameters())


@dataclass
class Skeleton:
    """A weight-stripped ONNX export of one architecture at one resolution."""

    arch: str
    resolution: int
    onnx_bytes: bytes
    params: int
    exporter: str = EXPORTER


def export_skeleton(arch: str, resolution: int, max_params: int | None = MAX_PARAMS,
                    meta_init: bool = False, fixed_batch: int | None = None,
                    dynamo: bool = False, **model_kwargs) -> Skeleton:
    """Export ``arch`` at ``resolution`` with a dynamic batch axis and strip its weights.

    Args:
        arch, resolution: the timm architecture and input size.
        max_params: refuse architectures above this many parameters (None: no limit).
        meta_init: build the parameters on the meta device and give them random values only
            before export (:mod:`trappm_ray.corpus.export`): no initialisation cost, same graph.
            Above :data:`LEAN_ABOVE_PARAMS`, each weight is a broadcast scalar and the export
            keeps no weight values (no memory for weights, no 2 GB protobuf limit).
        fixed_batch: export at this batch size without a dynamic batch axis, for models whose
            ops the legacy exporter cannot export with one (Unfold, adaptive max pooling); the
            featurizer re-binds the batch of such files where that is sound. With ``dynamo``,
            the graph is exported at this batch and nothing needs re-binding.
        dynamo: use the dynamo exporter (:func:`trappm_ray.corpus.export.export_dynamo`), the
            fallback for models the legacy one cannot export or whose export cannot be featurized.
        model_kwargs: further ``timm.create_model`` arguments (e.g. ``depth=...``); the
            parameter limit is not checked for such variants.

    Raises:
        ValueError: the architecture has more than ``max_params`` parameters.
    """
    import torch

    from trappm_ray.corpus import export

    if max_params is not None and not model_kwargs and (n := count_params(arch, resolution)) > max_params:
        raise ValueError(f"{arch} has {n:,} parameters, above the zoo's limit of {max_params:,}")
    # Seeded: an export in a Ray worker that has already exported other models would otherwise
    # draw other random weights, and a rare coincidence among them changes the graph by a node.
    torch.manual_seed(0)
    lean = meta_init and count_params(arch, resolution) > LEAN_ABOVE_PARAMS
    if meta_init:
        with export.meta_parameters():
            model = create_model(arch, resolution, **model_kwargs)
        export.materialize(model, expanded=lean)
    else:
        model = create_model(arch, resolution, **model_kwargs)
    model = model.eval()
    params = sum(p.numel() for p in model.parameters())
    # Random init leaves many tensors identical (zero-init gammas, LayerNorm ones); the exporter
    # would merge those into shared weights and add Identity nodes. Jitter keeps every weight
    # distinct (positive, so variances stay valid) and the graph unchanged.
    export.jitter_real_tensors(model)
    example = (torch.randn(fixed_batch or (2 if dynamo else 1), 3, resolution, resolution),)
    if dynamo:  # batch 2 as example: torch.export specialises a dimension of size 1
        onnx_bytes = export.export_dynamo(model, example, ["input"], dynamic_batch=not fixed_batch)
        opset = max(o.version for o in onnx.load_from_string(onnx_bytes).opset_import
                    if o.domain in ("", "ai.onnx"))
        batch = f"fixed batch {fixed_batch}" if fixed_batch else "dynamic batch axis"
        return Skeleton(arch, resolution, onnx_bytes, params,
                        EXPORTER_DYNAMO.format(opset=opset, batch=batch) + timm_provenance(arch))
    axes = {} if fixed_batch else {"input": {0: "batch"}, "output": {0: "batch"}}
    onnx_bytes = export.export_legacy(model, example, input_names=["input"], dynamic_axes=axes,
                                      export_params=not lean)
    exporter = EXPORTER_FIXED_BATCH.format(batch=fixed_batch) if fixed_batch else EXPORTER
    return Skeleton(arch, resolution, onnx_bytes, params, exporter + timm_provenance(arch))


__all__ = [
    "ALIASES",
    "own_resolution",
    "UNRELEASED",
    "EXPORTER",
    "EXPORTER_DYNAMO",
    "EXPORTER_FIXED_BATCH",
    "KEEP_INITIALIZER_MAX_ELEMENTS",
    "LEAN_ABOVE_PARAMS",
    "OTHER_FAMILIES",
    "PAPER_FAMILIES",
    "PINNED_TIMM",
    "Skeleton",
    "UNREGISTERED",
    "count_params",
    "create_model",
    "export_skeleton",
    "family_of",
    "list_architectures",
    "strip_weights",
    "timm_provenance",
    "unfused_attention",
]
