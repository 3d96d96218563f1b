"""Predictors composed of two: what a shipped GPU predictor lacks, answered with the spec model's help.

* :class:`SettingRatio`: a setting the shipped predictor was never trained on, as its answer times
  the spec model's ratio between that setting and the shipped one on the same device;
* :class:`TargetFill`: targets the device has no labels of (the RTX 4090: inference only), from
  the spec model of the same device.

Both play :class:`~trappm_ray.model.estimator.Estimator`, as their parts do.
"""
from __future__ import annotations


class SettingRatio:
    """A shipped GPU predictor answering an option it was never trained on, through the spec-based
    predictor of the same device, which was trained on the device's rows in that option.

    The answer is the shipped predictor's (in its own setting) times the spec model's ratio
    between the requested setting and the shipped one on this device: the option's effect comes
    from the device's own labels, the absolute level from the predictor that fits it best, so
    switching an option never changes the answer by a difference between two models.

    Args:
        shipped: the device's :class:`~trappm_ray.model.predictor.Predictor`.
        spec_predictor: the :class:`~trappm_ray.model.spec_model.SpecPredictor` bound to the device.
    """

    def __init__(self, shipped, spec_predictor):
        self.shipped, self.spec_predictor = shipped, spec_predictor
        own = shipped.manifest.get("options") or {}
        merged = {k: list(dict.fromkeys([*own.get(k, []), *v]))
                  for k, v in (spec_predictor.manifest.get("options") or {}).items()}
        self.base = {k: v[0] for k, v in own.items()}
        dev = dict(shipped.manifest.get("device") or {})
        dev["note"] = (f"a setting the {shipped.manifest.get('name')} predictor was not trained on (it was: "
                       f"{', '.join(f'{k} {v}' for k, v in self.base.items() if k != 'gpus')}): its answer x "
                       f"the spec-based predictor's ratio between the requested setting and that one on this "
                       f"device")
        self.manifest = {**shipped.manifest, "options": merged, "device": dev,
                         "name": f"{shipped.manifest.get('name')}+{spec_predictor.manifest.get('name')}"}

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(t for t in self.shipped.targets if t in self.spec_predictor.targets)

    def check(self, setting: dict) -> None:
        """As :meth:`SpecPredictor.check`: a precision the device has no roofline for is refused."""
        self.spec_predictor.check(setting)

    def to(self, device: str) -> SettingRatio:
        """Both parts compute on ``device``; returns self."""
        self.shipped.to(device)
        self.spec_predictor.to(device)
        return self

    def predict_graphs(self, graphs, settings_list: list[dict]) -> list[dict[str, float]]:
        """The shipped predictor's rows scaled by the spec model's requested / shipped-setting ratio."""
        based = [{**s, **self.base} for s in settings_list]
        rows = self.shipped.predict_graphs(graphs, based)
        asked = self.spec_predictor.predict_graphs(graphs, settings_list)
        base = self.spec_predictor.predict_graphs(graphs, based)
        out = []
        for row, a, b in zip(rows, asked, base):
            moved = {}
            for t in self.targets:
                ratio = a[t] / b[t]
                moved.update({k: row[k] * ratio for k in (t, f"{t}_std", f"{t}_low", f"{t}_high") if k in row})
                moved.update({k: a[k] for k in (f"{t}_floor", f"{t}_kernels") if k in a})  # the requested setting's
            out.append(moved)
        return out


class TargetFill:
    """A shipped GPU predictor completed, for the targets its device has no labels of (the RTX
    4090: inference only), by the spec-based predictor of the same device.

    Args:
        shipped: the device's :class:`~trappm_ray.model.predictor.Predictor`.
        spec_predictor: the :class:`~trappm_ray.model.spec_model.SpecPredictor` bound to the device.
    """

    def __init__(self, shipped, spec_predictor):
        self.shipped, self.spec_predictor = shipped, spec_predictor
        self.filled = tuple(t for t in spec_predictor.targets if t not in shipped.targets)
        dev = dict(shipped.manifest.get("device") or {})
        how = (spec_predictor.manifest.get("device") or {}).get("note") or "the spec-based predictor"
        dev["note"] = f"{', '.join(self.filled)}: no labels of this device; {how}"
        self.manifest = {**shipped.manifest, "device": dev, "targets": list(self.targets),
                         "launch": {**(spec_predictor.manifest.get("launch") or {}),
                                    **(shipped.manifest.get("launch") or {})},
                         "name": f"{shipped.manifest.get('name')}+{spec_predictor.manifest.get('name')}"}

    @property
    def targets(self) -> tuple[str, ...]:
        return (*self.shipped.targets, *self.filled)

    def check(self, setting: dict) -> None:
        """As :meth:`SpecPredictor.check`, for the filled targets."""
        self.spec_predictor.check(setting)

    def to(self, device: str) -> TargetFill:
        """Both parts compute on ``device``; returns self."""
        self.shipped.to(device)
        self.spec_predictor.to(device)
        return self

    def predict_graphs(self, graphs, settings_list: list[dict]) -> list[dict[str, float]]:
        """The shipped predictor's rows, with the spec-based predictor's for the filled targets."""
        rows = self.shipped.predict_graphs(graphs, settings_list)
        for row, other in zip(rows, self.spec_predictor.predict_graphs(graphs, settings_list)):
            row.update({k: v for k, v in other.items()
                        if any(k == t or k.startswith(f"{t}_") for t in self.filled)})
        return rows


__all__ = ["SettingRatio", "TargetFill"]
