"""What a predictor is, in one typed and versioned schema that training writes and serving reads.

A predictor's ``manifest.json`` says what it answers (targets, units, the settings its labels
hold), for which device, from which features, data and code, how well it did on what it never
saw, and how its intervals and small-workload model were fitted. Two kinds share the schema:

* ``network``: a GNN predictor (:mod:`trappm_ray.model.stored`: ``weights.npz``); its own part
  is :class:`Network` (seeds, head and encoder shapes, inputs, blend);
* ``gpu-spec``: the spec-based model (:mod:`trappm_ray.model.spec_model`: XGBoost boosters); its
  own part is :class:`Boosters`.

A composition (:mod:`trappm_ray.model.compositions`) or a spec model bound to one GPU answers
with a copy (:func:`dataclasses.replace`) whose :class:`Device` says how its answers are derived
(``note``). Schema 1 replaced the untyped dicts of two layouts (``code``/``config`` in the
spec-based model's, ``code_version``/``recipe`` in the networks'); the shipped manifests were
migrated once, and a manifest of another schema is refused with its number.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA = 1
NETWORK, SPEC = "network", "gpu-spec"


class ManifestError(ValueError):
    """A manifest of another schema, or one whose fields do not fit this one."""


def _known(cls, d: dict, where: str) -> dict:
    """``d`` checked to hold only ``cls``'s fields (a misspelt key is an error, not ignored)."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ManifestError(f"{where}: unknown field(s) {', '.join(unknown)} (schema {SCHEMA})")
    return d


@dataclass(frozen=True)
class Device:
    """The device a predictor answers for.

    Args:
        slug: its label set's slug (``rtx3090-amp``, ``intel-r-xeon-r-processor-t1``).
        name: the device's name as its labels report it.
        kind: ``cpu``, ``cuda`` or ``rocm`` (empty: read from the slug, :func:`device_of`).
        threads: CPU threads of its labels (CPUs only).
        torch: PyTorch version(s) of its labels.
        spec: its row in the spec table (``data/devices.csv``) for a GPU.
        spec_based, spec_source, spec_only, reference, note: set where serving binds a predictor
            (never stored): answered by the spec-based model, from the spec table or a user's
            JSON file, with no training row of this device, with a reference GPU's answers
            transferred; ``note`` says how the answers are derived and how wrong that has been.
    """

    slug: str
    name: str = ""
    kind: str = ""
    threads: int | None = None
    torch: str | None = None
    spec: str | None = None
    spec_based: bool = False
    spec_source: str = ""
    spec_only: bool = False
    reference: str = ""
    note: str = ""

    @classmethod
    def from_dict(cls, d: dict) -> Device:
        return cls(**_known(cls, d, "device"))

    def to_dict(self) -> dict[str, Any]:
        """The stored fields, and those serving set (only where set)."""
        d = asdict(self)
        for k in ("spec_based", "spec_source", "spec_only", "reference", "note"):
            if not d[k] and not (k == "spec_only" and self.spec_based):
                del d[k]
        return d


@dataclass(frozen=True)
class Network:
    """What a GNN predictor's weights are (:mod:`trappm_ray.model.forward` runs them).

    Args:
        seeds: one network per seed and target; answers are their mean.
        head: the regressor's shape: ``hidden``, ``fc``, ``dropout``, ``node_dropout``, the
            targets predicted ``batch_affine``, and ``static_dim`` for roofline inputs.
        encoder: the frozen graph encoder (``in_dim``, ``dims``, ``dropout``, ``pretrained``),
            None without embedding.
        inputs: ``graph`` (the feature set's node features) or ``roofline``
            (:mod:`trappm_ray.model.roofline_inputs`: the network predicts the ratio to the floor).
        run: per target the framework setting of its labels (``torch2``, ``compiled``).
        blend: the static MLP blended with each seed's network (``hidden``, per target
            ``weights``: the network's share), None without.
        weights_format: the weights file's format (:data:`trappm_ray.model.stored.FORMAT_VERSION`).
        weights_sha256: the hash of the weights file, checked on load.
    """

    seeds: tuple[int, ...]
    head: dict[str, Any]
    encoder: dict[str, Any] | None = None
    inputs: str = "graph"
    run: dict[str, dict[str, int]] = field(default_factory=dict)
    blend: dict[str, Any] | None = None
    weights_format: int = 0
    weights_sha256: str = ""

    @classmethod
    def from_dict(cls, d: dict) -> Network:
        d = _known(cls, d, "network")
        return cls(**{**d, "seeds": tuple(d["seeds"])})


@dataclass(frozen=True)
class Boosters:
    """What the spec-based model's boosters are (:class:`~trappm_ray.model.spec_model.SpecModel`).

    Args:
        variant: the feature variant (:data:`~trappm_ray.model.spec_model.VARIANTS`).
        features: the design matrix's column names.
        files: per booster ``file``, ``seed`` and ``sha256`` (checked on load).
        params: depth, rounds, learning rate, device balance, seeds.
        target: what the boosters predict, in words.
        host_us_per_kernel: per target the host's time per graph kernel of the answer's base;
            None for a model fitted before the base existed (it predicts against the floor).
        efficiency: per target the median measured / base of the GPU rows, averaged in.
        lodo: per target leave-one-device-out errors, per device and their mean.
        lodo_candidates: the same summary for every variant and depth compared.
        own_rows: a device with at least this many of the model's training rows of a target
            keeps the model's own answer for it; below, a shipped GPU predictor's answer is moved
            by the roofline floors (:mod:`trappm_ray.model.floor_ratio`): the routing the model's
            evaluation compared (``docs/results-gpu.md``, reference rows).
    """

    variant: str
    features: tuple[str, ...]
    files: tuple[dict[str, Any], ...]
    params: dict[str, Any] = field(default_factory=dict)
    target: str = ""
    host_us_per_kernel: dict[str, float] | None = None
    efficiency: dict[str, float] = field(default_factory=dict)
    lodo: dict[str, Any] = field(default_factory=dict)
    lodo_candidates: dict[str, Any] = field(default_factory=dict)
    own_rows: int = 500

    @classmethod
    def from_dict(cls, d: dict) -> Boosters:
        d = _known(cls, d, "boosters")
        return cls(**{**d, "features": tuple(d["features"]), "files": tuple(d["files"])})


@dataclass(frozen=True)
class Manifest:
    """A predictor's manifest (schema :data:`SCHEMA`).

    Args:
        name: its registry name (a composition's: its parts' joined by ``+``).
        kind: :data:`NETWORK` or :data:`SPEC`.
        feature_set: the graph features it reads (:mod:`trappm_ray.graph.features`).
        targets: what it answers (:mod:`trappm_ray.targets`), ``units`` their units.
        device: the device it answers for.
        options: per setting field the values its labels hold, the first the default; empty for
            a predictor registered before manifests listed them (the CPU harness's setting).
        moves: setting fields a composition moves an answer to (:class:`~trappm_ray.model.compositions.SettingMove`).
        data: provenance of its labels (counts, families, sources, hash, dates).
        metrics: its errors on what it never saw during fitting.
        domain: the training graphs' static features (:mod:`trappm_ray.model.domain`).
        intervals: how its intervals were fitted, in words; ``residual_quantiles`` the fit.
        launch: per target the small-workload model fitted to its labels (:mod:`trappm_ray.model.launch`).
        correction: per target how far its learned answer may stand from the step model, by kind
            of kernel (:class:`~trappm_ray.model.correction.CorrectionBounds`, as a dict); empty:
            unbounded (a predictor fitted before the bounds).
        layout: per target the NHWC / NCHW factor per kind of kernel a channels-last answer is
            moved from the NCHW one by (:class:`~trappm_ray.model.layout.LayoutFactors`, as a
            dict); empty: the networks answer channels-last themselves.
        envelope_top: a CPU predictor's batch envelope reaches up to this batch, the lower quartile
            of its labels' batches (:func:`trappm_ray.model.launch.envelope_top`); 0: none (GPU
            predictors move answers with the step model).
        recipe: the training configuration.
        transfer: for a fine-tuned predictor, the predictor it started from.
        version, registered_at: set by the registry; created, command, code_version, torch,
            wall_s: how and when it was trained.
        network, boosters: the part of its kind.
    """

    name: str
    kind: str
    feature_set: str
    targets: tuple[str, ...]
    device: Device
    units: dict[str, str] = field(default_factory=dict)
    options: dict[str, list] = field(default_factory=dict)
    moves: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    domain: dict[str, Any] | None = None
    intervals: str = ""
    residual_quantiles: dict[str, Any] = field(default_factory=dict)
    launch: dict[str, dict[str, Any]] = field(default_factory=dict)
    correction: dict[str, dict[str, Any]] = field(default_factory=dict)
    layout: dict[str, dict[str, Any]] = field(default_factory=dict)
    envelope_top: int = 0
    recipe: dict[str, Any] = field(default_factory=dict)
    transfer: dict[str, Any] | None = None
    version: str = ""
    registered_at: str = ""
    created: str = ""
    command: str = ""
    code_version: str = ""
    torch: str = ""
    wall_s: float | None = None
    network: Network | None = None
    boosters: Boosters | None = None
    schema: int = SCHEMA

    @property
    def net(self) -> Network:
        """:attr:`network`, which a network predictor has."""
        if self.network is None:
            raise ManifestError(f"{self.name}: no network part (a {self.kind} predictor)")
        return self.network

    def replace(self, **changes: Any) -> Manifest:
        """A copy with ``changes`` (the manifest is immutable: compositions answer with copies)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, d: dict) -> Manifest:
        """Read a stored manifest; :class:`ManifestError` names a schema or field that does not fit."""
        if not isinstance(d, dict):
            raise ManifestError("a manifest is a JSON object")
        if d.get("schema") != SCHEMA:
            raise ManifestError(f"manifest schema {d.get('schema')!r}; this version reads schema {SCHEMA}")
        d = _known(cls, d, "manifest")
        try:
            return cls(**{**d, "targets": tuple(d["targets"]), "moves": tuple(d.get("moves", ())),
                          "device": Device.from_dict(d["device"]),
                          "network": Network.from_dict(d["network"]) if d.get("network") else None,
                          "boosters": Boosters.from_dict(d["boosters"]) if d.get("boosters") else None})
        except (KeyError, TypeError) as e:
            raise ManifestError(f"manifest: missing or malformed field: {e}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        try:
            return cls.from_dict(json.loads(text))
        except ValueError as e:
            if isinstance(e, ManifestError):
                raise
            raise ManifestError(f"manifest is not JSON: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["device"] = self.device.to_dict()
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


__all__ = ["SCHEMA", "NETWORK", "SPEC", "ManifestError", "Device", "Network", "Boosters", "Manifest"]
