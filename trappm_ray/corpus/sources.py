"""One interface over the model sources of the corpus: timm, torchvision, transformers LMs and the
models of public measurements no zoo names (``workload``).

:func:`count_params` sizes a model without memory; :func:`export` returns its weight-stripped
skeleton, the exporter that made it, and how to featurize it (images bind the resolution to the
spatial dimensions; text models bind their ``seq`` axis to the task's resolution).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

SOURCES = ("timm", "torchvision", "hf", "workload")


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
    if source == "workload":
        from trappm_ray.corpus import workload_models

        return workload_models.family_of(arch)
    if source == "torchvision":
        arch = arch.removeprefix(TORCHVISION_PREFIX)
    return zoo.family_of(arch)


def count_params(arch: str, resolution: int, source: str = "timm") -> int:
    """Parameter count, computed on the meta device."""
    if source == "hf":
        from trappm_ray.corpus import text_models

        return text_models.count_params(arch)
    if source == "workload":
        from trappm_ray.corpus import workload_models

        return workload_models.count_params(arch)
    if source == "torchvision":
        from trappm_ray.corpus import torchvision_models

        return torchvision_models.count_params(arch)
    from trappm_ray.corpus import zoo

    return zoo.count_params(arch, resolution)


class DynamoFailed(RuntimeError):
    """Both exporters failed; the message gives the first line of each error."""

    def __init__(self, legacy: BaseException, dynamo: BaseException):
        # both within the 300 characters a corpus manifest keeps of an error
        super().__init__(f"{_first_line(legacy, 110)} | dynamo: {_first_line(dynamo, 110)}")
        self.legacy, self.dynamo = legacy, dynamo


def _first_line(e: BaseException, limit: int = 300) -> str:
    """The first line of an error's message; for the dynamo exporter's wrapped errors (whose
    own first line is always "Failed to convert..."), of the innermost cause."""
    while e.__cause__ is not None and type(e).__module__.startswith("torch.onnx"):
        e = e.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()  # the exporter's terminal colours
    return f"{e.__class__.__name__}: {text.splitlines()[0][:limit] if text else ''}"


def _unknown_model(e: BaseException) -> bool:
    return isinstance(e, RuntimeError) and str(e).startswith("Unknown model")


def _export_timm_legacy(arch: str, resolution: int, meta_init: bool):
    """The legacy exporter, with its retries for the constructs it cannot export as such."""
    from trappm_ray.corpus import zoo

    try:
        return zoo.export_skeleton(arch, resolution, max_params=None, meta_init=meta_init)
    except Exception as e:
        if type(e).__name__ == "SymbolicValueError":  # an op the exporter cannot make dynamic
            log.warning("%s@%s: no dynamic batch axis (%s), exporting at batch 1", arch, resolution, e)
            return zoo.export_skeleton(arch, resolution, max_params=None, meta_init=meta_init,
                                       fixed_batch=1)
        if "scaled_dot_product_attention" in str(e):
            log.warning("%s@%s: fused attention does not export (%s), exporting it unfused", arch, resolution, e)
            with zoo.unfused_attention():
                return zoo.export_skeleton(arch, resolution, max_params=None, meta_init=meta_init)
        if meta_init and not _unknown_model(e):  # some constructors read their own weights' values
            log.warning("%s@%s: meta-device build failed (%s), building it for real", arch, resolution, e)
            return zoo.export_skeleton(arch, resolution, max_params=None, meta_init=False)
        raise


def export_timm_dynamo(arch: str, resolution: int, meta_init: bool = True,
                       fixed_batch: int | None = None):
    """A timm model from the dynamo exporter (dynamic batch axis unless ``fixed_batch``).

    Fused attention is exported unfused when its dynamo translation refuses the call (5-D
    query tensors in Hiera); a model whose meta-device build fails is built for real.
    """
    from trappm_ray.corpus import zoo

    kwargs = dict(max_params=None, fixed_batch=fixed_batch, dynamo=True)
    try:
        return zoo.export_skeleton(arch, resolution, meta_init=meta_init, **kwargs)
    except Exception as e:
        if "scaled_dot_product_attention" in str(e):
            log.warning("%s@%s: dynamo: fused attention does not export (%s), exporting it unfused",
                        arch, resolution, _first_line(e))
            with zoo.unfused_attention():
                return zoo.export_skeleton(arch, resolution, meta_init=meta_init, **kwargs)
        if meta_init and "meta tensor" in str(e):  # only then: a real build costs the weights' memory
            log.warning("%s@%s: dynamo: meta-device build failed (%s), building it for real",
                        arch, resolution, _first_line(e))
            return zoo.export_skeleton(arch, resolution, meta_init=False, **kwargs)
        raise


def export(arch: str, resolution: int, source: str = "timm", meta_init: bool = True,
           dynamo: bool = False, fixed_batch: int | None = None) -> Exported:
    """Export one model of any source at one resolution (sequence length for text models).

    Args:
        arch: corpus name (timm name, ``torchvision_<name>``, a text-model config name, or a
            workload's name).
        resolution: pixels, or tokens for ``hf`` (and a BERT workload); a workload's other inputs
            are the fixed sizes its module states.
        source: one of :data:`SOURCES`.
        meta_init: build parameters on the meta device (no initialisation), see
            :mod:`trappm_ray.corpus.export`.
        dynamo, fixed_batch: timm only: export with the dynamo exporter, at this fixed batch
            (default: a dynamic batch axis). Without ``dynamo``, the legacy exporter is tried
            first and the dynamo one where it fails.

    Raises:
        DynamoFailed: both exporters failed (its message gives both errors).
    """
    if source == "hf":
        from trappm_ray.corpus import text_models

        onnx_bytes, params = text_models.export_text_model(arch, meta_init=meta_init)
        return Exported(onnx_bytes, params, text_models.exporter_of(arch), None, {"seq": resolution})
    if source == "torchvision":
        from trappm_ray.corpus import torchvision_models

        onnx_bytes, params = torchvision_models.export_torchvision(arch, resolution, meta_init=meta_init)
        dynamo = arch.startswith(torchvision_models.DYNAMO_PREFIX)
        exporter = torchvision_models.EXPORTER_DYNAMO if dynamo else torchvision_models.EXPORTER
        return Exported(onnx_bytes, params, exporter, resolution)
    if source == "workload":
        from trappm_ray.corpus import workload_models

        dims = {"seq": resolution} if arch in workload_models.BERT_HEADS else {}
        return Exported(workload_models.export(arch), workload_models.count_params(arch), workload_models.EXPORTER,
                        None, dims)
    if source != "timm":
        raise ValueError(f"unknown model source {source!r}, expected one of {SOURCES}")
    if dynamo or fixed_batch:
        sk = export_timm_dynamo(arch, resolution, meta_init, fixed_batch)
        return Exported(sk.onnx_bytes, sk.params, sk.exporter, resolution)
    try:
        sk = _export_timm_legacy(arch, resolution, meta_init)
    except Exception as e:
        if _unknown_model(e):
            raise
        log.warning("%s@%s: the legacy exporter failed (%s), trying the dynamo exporter",
                    arch, resolution, _first_line(e))
        try:
            sk = export_timm_dynamo(arch, resolution, meta_init)
        except Exception as e2:
            raise DynamoFailed(e, e2) from e
    return Exported(sk.onnx_bytes, sk.params, sk.exporter, resolution)


__all__ = ["SOURCES", "DynamoFailed", "Exported", "count_params", "export", "export_timm_dynamo",
           "family_of"]
