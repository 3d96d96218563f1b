"""The stored form of a trained predictor, and its registry: read and written without torch.

A predictor is a directory (local or ``s3://``) holding ``manifest.json`` (what it predicts, for
which device, from which features, data and code, with its test metrics) and ``weights.npz``
(every tensor of its networks in one flat NumPy archive, read with ``allow_pickle=False``: no
code runs on load). ``manifest.json`` is written last: its presence marks a complete save.
Registry layout: ``<root>/<name>/<version>/``, versions ``v0001``, ``v0002``, ... in order of
registration.

Format 2 (this one) replaced format 1's ``weights.pt`` (a torch pickle read with
``weights_only=True``): serving evaluates the networks in NumPy (:mod:`trappm_ray.model.forward`)
and need not import torch to read them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import re
from datetime import datetime, timezone

import numpy as np

from trappm_ray import storage
from trappm_ray.graph import features
from trappm_ray.model.estimator import PredictorError
from trappm_ray.model.manifest import Manifest, ManifestError

FORMAT_VERSION = 2
WEIGHTS = "weights.npz"
MANIFEST = "manifest.json"


def write(uri: str, manifest: Manifest, arrays: dict[str, np.ndarray]) -> Manifest:
    """Store ``arrays`` then ``manifest`` (its network part stamped with the format and the
    weights' hash) at ``uri``; the manifest as written."""
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    weights = buf.getvalue()
    net = dataclasses.replace(manifest.net, weights_format=FORMAT_VERSION,
                              weights_sha256=hashlib.sha256(weights).hexdigest())
    manifest = manifest.replace(network=net)
    storage.write_bytes(storage.join(uri, WEIGHTS), weights)
    storage.write_bytes(storage.join(uri, MANIFEST), manifest.to_json().encode())
    return manifest


def rewrite_manifest(uri: str, manifest: Manifest) -> Manifest:
    """Store a changed ``manifest`` over the one at ``uri``, its weights untouched (their hash
    must still match: a manifest of other weights is refused)."""
    if manifest.network is not None and manifest.net.weights_sha256 != read_manifest(uri).net.weights_sha256:
        raise PredictorError(f"{uri}: the manifest names other weights than those stored")
    storage.write_bytes(storage.join(uri, MANIFEST), manifest.to_json().encode())
    return manifest


def read_manifest(uri: str) -> Manifest:
    """The manifest stored at ``uri`` (either kind); PredictorError names what is wrong."""
    try:
        return Manifest.from_json(storage.read_bytes(storage.join(uri, MANIFEST)))
    except OSError as e:
        raise PredictorError(f"no readable predictor at {uri}: {e}") from e
    except ManifestError as e:
        raise PredictorError(f"{uri}: {e}") from None


def read(uri: str) -> tuple[Manifest, dict[str, np.ndarray]]:
    """The manifest and weights stored at ``uri``, checked: format, hash, feature set and the
    encoder's input size. PredictorError names what is wrong."""
    manifest = read_manifest(uri)
    if manifest.network is None:
        raise PredictorError(f"{uri}: a {manifest.kind} predictor, not a network")
    net = manifest.network
    if net.weights_format != FORMAT_VERSION:
        raise PredictorError(f"{uri}: weights format {net.weights_format!r}, this version reads "
                             f"{FORMAT_VERSION} (weights.npz; format 1's weights.pt is no longer read)")
    try:
        weights = storage.read_bytes(storage.join(uri, WEIGHTS))
    except OSError as e:
        raise PredictorError(f"no readable predictor at {uri}: {e}") from e
    if hashlib.sha256(weights).hexdigest() != net.weights_sha256:
        raise PredictorError(f"{uri}: {WEIGHTS} does not match its manifest (damaged copy?)")
    try:
        fs = features.get(manifest.feature_set)
    except KeyError as e:
        raise PredictorError(f"{uri}: unknown feature set {manifest.feature_set!r}") from e
    enc = net.encoder
    if enc and enc["in_dim"] != fs.node_dim:
        raise PredictorError(f"{uri}: encoder expects {enc['in_dim']} node features, "
                             f"feature set {fs.name} has {fs.node_dim}")
    try:
        with np.load(io.BytesIO(weights), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise PredictorError(f"{uri}: {WEIGHTS} is not a readable archive: {e}"[:400]) from e
    return manifest, arrays


def versions(base: str) -> list[str]:
    """The registered versions under ``base``, oldest first."""
    names = (p.rstrip("/").rsplit("/", 1)[-1] for p in storage.listdir(base))
    return sorted(n for n in names if re.fullmatch(r"v\d{4}", n))


def next_version(root: str, name: str) -> tuple[str, dict[str, str]]:
    """Where the next version of ``name`` goes under ``root``, and the manifest fields it gets."""
    base = storage.join(root, name)
    found = versions(base)
    version = f"v{int(found[-1][1:]) + 1 if found else 1:04d}"
    return storage.join(base, version), {"name": name, "version": version,
                                         "registered_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def latest(root: str, name: str) -> str:
    """URI of the newest complete version of ``name`` under ``root``."""
    base = storage.join(root, name)
    for version in reversed(versions(base)):
        uri = storage.join(base, version)
        if storage.exists(storage.join(uri, MANIFEST)):
            return uri
    raise PredictorError(f"no complete version of {name!r} under {root}")


__all__ = ["FORMAT_VERSION", "WEIGHTS", "MANIFEST", "write", "rewrite_manifest", "read_manifest", "read", "versions", "next_version", "latest"]
