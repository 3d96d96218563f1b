"""One interface over the model sources of the corpus: timm, torchvision and transformers LMs.

:func:`count_params` sizes a model without memory; :func:`export` returns its weight-stripped
skeleton, the exporter that made it, and how to featurize it (images bind the resolution to the
spatial dimensions; text models bind their ``seq`` axis to the task's resolution).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

SOURCES = ("timm", "torchvision", "hf")


@dataclass
class Exported:
    """A skeleton and how to featurize it.

    Args:
        onnx_bytes: the weight-stripped ONNX model (dynamic batch axis).
        params: parameter count of the torch model.
        exporter: provenance string stored with every graph row.
        resolution: the ``resolution`` argument of ``featurize`` (None for text models).
        dims: named dimensions for ``featurize`` (``{"seq": 512}`` for text models).
    """

    onnx_bytes: bytes
    params: int
    exporter: str
    resolution: int | None
    dims: dict = field(default_factory=dict)


def family_of(arch: str, source: str = "timm") -> str:
    """Family of a corpus architecture name of any source."""
    from trappm_ray.corpus import zoo
    from trappm_ray.corpus.keys import TORCHVISION_PREFIX

    if source == "hf":
        from trappm_ray.corpus import text_models

        return text_models.family_of(arch)
    if source == "torchvision":
        arch = arch.removeprefix(TORCHVISION_PREFIX)
    return zoo.family_of(arch)


def count_params(arch: str, resolution: int, source: str = "timm") -> int:
    """Parameter count, computed on the meta device."""
    if source == "hf":
        from trappm_ray.corpus import text_models

        return text_models.count_params(arch)
    if source == "torchvision":
        from trappm_ray.corpus import torchvision_models

        return torchvision_models.count_params(arch)
    from trappm_ray.corpus import zoo

    return zoo.count_params(arch, resolution)


def export(arch: str, resolution: int, source: str = "timm", meta_init: bool = True) -> Exported:
    """Export one model of any source at one resolution (sequence length for text models).

    Args:
        arch: corpus name (timm name, ``torchvision_<name>``, or a text-model config name).
        resolution: pixels, or tokens for ``hf``.
        source: one of :data:`SOURCES`.
        meta_init: build parameters on the meta device (no initialisation), see
            :mod:`trappm_ray.corpus.export`.
    """
    if source == "hf":
        from trappm_ray.corpus import text_models

        onnx_bytes, params = text_models.export_text_model(arch, meta_init=meta_init)
        return Exported(onnx_bytes, params, text_models.EXPORTER, None, {"seq": resolution})
    if source == "torchvision":
        from trappm_ray.corpus import torchvision_models

        onnx_bytes, params = torchvision_models.export_torchvision(arch, resolution, meta_init=meta_init)
        dynamo = arch.startswith(torchvision_models.DYNAMO_PREFIX)
        exporter = torchvision_models.EXPORTER_DYNAMO if dynamo else torchvision_models.EXPORTER
        return Exported(onnx_bytes, params, exporter, resolution)
    if source != "timm":
        raise ValueError(f"unknown model source {source!r}, expected one of {SOURCES}")
    from trappm_ray.corpus import zoo

    try:
        sk = zoo.export_skeleton(arch, resolution, max_params=None, meta_init=meta_init)
    except Exception as e:
        if type(e).__name__ == "SymbolicValueError":  # an op the exporter cannot make dynamic
            log.warning("%s@%s: no dynamic batch axis (%s), exporting at batch 1", arch, resolution, e)
            sk = zoo.export_skeleton(arch, resolution, max_params=None, meta_init=meta_init,
                                     fixed_batch=1)
        elif "scaled_dot_product_attention" in str(e):
            log.warning("%s@%s: fused attention does not export (%s), exporting it unfused", arch, resolution, e)
            with zoo.unfused_attention():
                sk = zoo.export_skeleton(arch, resolution, max_params=None, meta_init=meta_init)
        elif meta_init:  # some constructors read their own weights' values
            log.warning("%s@%s: meta-device build failed (%s), building it for real", arch, resolution, e)
            sk = zoo.export_skeleton(arch, resolution, max_params=None, meta_init=False)
        else:
            raise
    return Exported(sk.onnx_bytes, sk.params, sk.exporter, resolution)


__all__ = ["SOURCES", "Exported", "count_params", "export", "family_of"]
