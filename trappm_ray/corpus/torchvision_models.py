"""torchvision classification models (no weights) as corpus skeletons.

Corpus names are ``torchvision_<name>`` (``torchvision_resnet50``), as the importer of
ryujaehun's torchvision benchmark names its label rows; ``torchvision_dynamo_<name>`` is the same
model from the dynamo exporter. Models come from
``torchvision.models.get_model(name, weights=None)`` with parameters on the meta device, and are
exported by torch's legacy exporter (the corpus default) or by the dynamo exporter
(``torch.onnx.export(dynamo=True)``, whose graphs differ: another node vocabulary and layout).
"""
from __future__ import annotations

import logging
import warnings

TORCHVISION_PREFIX = "torchvision_"  # as trappm_ray.labels.public_ryujaehun.ARCH_PREFIX

DYNAMO_PREFIX = TORCHVISION_PREFIX + "dynamo_"

log = logging.getLogger(__name__)

EXPORTER = "torch.onnx legacy (dynamo=False), opset 17, eval mode, dynamic batch axis, torchvision"
EXPORTER_DYNAMO = "torch.onnx dynamo (dynamo=True), opset 18, eval mode, dynamic batch axis, torchvision"


def model_name(arch: str) -> str:
    """The torchvision name of a corpus architecture (prefix removed)."""
    return arch.removeprefix(DYNAMO_PREFIX).removeprefix(TORCHVISION_PREFIX)


def list_classification_models(dynamo: bool = False) -> list[str]:
    """Corpus names of every torchvision classification model (dynamo-exporter names)."""
    import torchvision

    prefix = DYNAMO_PREFIX if dynamo else TORCHVISION_PREFIX
    return [prefix + n for n in torchvision.models.list_models(module=torchvision.models)]


def build_model(arch: str, meta: bool = True):
    """``torchvision.models.get_model(name, weights=None)``, eval mode.

    Args:
        arch: ``torchvision_<name>`` or a bare torchvision name.
        meta: parameters on the meta device (see :func:`trappm_ray.corpus.export.meta_parameters`).
    """
    import contextlib

    import torch
    import torchvision

    from trappm_ray.corpus import export

    torch.manual_seed(0)
    with export.meta_parameters() if meta else contextlib.nullcontext(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torchvision.models.get_model(model_name(arch), weights=None)
    return model.eval()


def count_params(arch: str) -> int:
    """Parameter count, on the meta device."""
    import torch

    with torch.device("meta"):
        model = build_model(arch, meta=False)
    return sum(p.numel() for p in model.parameters())


def export_torchvision(arch: str, resolution: int = 224, meta_init: bool = True,
                       dynamo: bool | None = None) -> tuple[bytes, int]:
    """Export one torchvision model with a dynamic batch axis; returns (ONNX bytes, params).

    Args:
        arch: ``torchvision_<name>``.
        resolution: input size in pixels.
        meta_init: build the parameters on the meta device (random values only for the export).
        dynamo: use the dynamo exporter (``torch.export``) instead of the legacy one
            (None: when ``arch`` starts with :data:`DYNAMO_PREFIX`).
    """
    import torch

    from trappm_ray.corpus import export

    if dynamo is None:
        dynamo = arch.startswith(DYNAMO_PREFIX)
    model = build_model(arch, meta=meta_init)
    export.materialize(model)
    export.jitter_real_tensors(model)
    params = sum(p.numel() for p in model.parameters())
    example = torch.randn(2, 3, resolution, resolution)
    if not dynamo:
        onnx_bytes = export.export_legacy(model, (example,), input_names=["input"],
                                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        return onnx_bytes, params
    return export.export_dynamo(model, (example,), input_names=["input"]), params


__all__ = ["DYNAMO_PREFIX", "EXPORTER", "EXPORTER_DYNAMO", "build_model", "count_params", "export_torchvision",
           "list_classification_models", "model_name"]
