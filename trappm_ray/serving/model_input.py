"""What a prediction reads: ONNX bytes from a path, ``s3://`` URI, bytes or ModelProto, or a torch
module or timm name exported on the fly (the ``zoo`` extra), each with a label for the answer.
Files above the size limit are refused before they are read.
"""
from __future__ import annotations

import os
from pathlib import Path

import onnx

from trappm_ray import errors, storage
from trappm_ray.graph.onnx_io import Limits

DEFAULT_RESOLUTION = 224  # for timm names and torch modules, which carry no input shape


def _export_module(module, resolution: int, input_shape: tuple[int, ...] | None) -> bytes:
    """A torch module exported as the corpus exports models (dynamic batch, weights stripped)."""
    import torch

    from trappm_ray.corpus.export import export_legacy

    shape = tuple(input_shape or (3, resolution, resolution))
    return export_legacy(module.eval(), (torch.randn(1, *shape),), ["input"],
                         {"input": {0: "batch"}, "output": {0: "batch"}})


def model_bytes(model, resolution: int | None = None, input_shape: tuple[int, ...] | None = None,
                limits: Limits = Limits()) -> tuple[bytes, str]:
    """``(ONNX bytes, a label)`` for a path, ``s3://`` URI, bytes, ModelProto, torch module or
    timm name (the last two need the ``zoo`` extra and are exported on the fly)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), "<bytes>"
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString(), model.graph.name or "<ModelProto>"
    if hasattr(model, "state_dict") and callable(model):
        return _export_module(model, resolution or DEFAULT_RESOLUTION, input_shape), type(model).__name__
    text = os.fspath(model)
    if text.startswith("s3://"):
        fs, path = storage.fs_and_path(text)
        if fs.size(path) > limits.max_file_bytes:
            raise errors.TooLarge(f"{text} is above the limit of {limits.max_file_bytes:,} bytes")
        return storage.read_bytes(text), text
    path = Path(text)
    if path.is_file():
        if path.stat().st_size > limits.max_file_bytes:
            raise errors.TooLarge(f"file is {path.stat().st_size:,} bytes, limit {limits.max_file_bytes:,}")
        return path.read_bytes(), text
    if path.suffix == ".onnx" or os.sep in text or not text.replace("_", "").replace(".", "").isalnum():
        raise errors.NotAModel(f"{text} is not a file")
    from trappm_ray.corpus.zoo import export_skeleton  # torch and timm are imported inside, on use

    try:
        return export_skeleton(text, resolution or DEFAULT_RESOLUTION).onnx_bytes, text
    except ImportError:
        raise errors.NotAModel(f"{text} is not a file (timm names need the zoo extra)") from None
    except RuntimeError as e:  # timm: "Unknown model"
        raise errors.NotAModel(f"{text} is neither a file nor a timm model ({e})") from None


__all__ = ["DEFAULT_RESOLUTION", "model_bytes"]
