"""How far should an answer's interval widen when the model is unlike the predictor's training graphs?

    .venv/bin/python experiments/interval_widening.py [rows.parquet]     (about 10 minutes on 2 cores)

The product widens a conformal band (the spec-based predictor's, calibrated leaving each device
out) in log space by the domain check's ratio of distance to threshold
(:mod:`trappm_ray.model.domain`): ``mean x (low / mean) ** widen`` (capped at 2 since this ran,
``domain.WIDEN_MAX``, which these rows never reach). Checked on rows no predictor
saw, the GPU campaign's (an H200: no labels of it anywhere), through ``trappm_ray.predict`` as a
user asks: per row the answer, its band, the widening and the measurement (``rows.parquet``,
written once and reused). Printed per rule of the exponent (none, as shipped, capped, logarithmic)
the coverage of the 95% band and its median width (high / low), among the rows the check flags
and the others.
"""
from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

import trappm_ray
from trappm_ray.corpus.text_models import config_dict
from trappm_ray.labels.campaign_import import is_campaign_device
from trappm_ray.labels.store import device_slugs, ok_labels
from trappm_ray.serving.model_input import model_bytes

TARGETS = ("train_step_ms", "inference_ms")
_TEXT: dict[str, bytes] = {}


def _model(row: dict):
    if row["model_source"] != "transformers":
        return row["arch"], None
    if row["arch"] not in _TEXT:
        path = Path(tempfile.mkdtemp()) / "config.json"
        path.write_text(json.dumps(config_dict(row["arch"])))
        _TEXT[row["arch"]] = model_bytes(path)[0]
    return _TEXT[row["arch"]], {"seq": int(row["seq_len"])}


def collect(labels: str = "data/labels") -> pd.DataFrame:
    out = []
    for slug in device_slugs(labels):
        if not is_campaign_device(labels, slug):
            continue
        for r in ok_labels(labels, slug).to_pylist():
            if not r.get("campaign_item"):
                continue
            model, dims = _model(r)
            try:
                p = trappm_ray.predict(model, r["batch_size"], r["device_spec"],
                                       resolution=None if dims else r["resolution"], dims=dims,
                                       precision=r["precision"], optimizer=r["optimizer"],
                                       memory_format=None if dims else r["memory_format"],
                                       recompute=r["recompute"] != "none", grad_accum=int(r["grad_accum"]))
            except ValueError:
                continue
            for t in TARGETS:
                e = getattr(p, t)
                if r.get(t) and e is not None:
                    out.append({"arch": r["arch"], "batch": r["batch_size"], "target": t, "measured": r[t],
                                "value": e.value, "low": e.low, "high": e.high,
                                "widen": p.domain.get("widen", 1.0), "extrapolates": bool(p.domain.get("extrapolates")),
                                "ratio": (p.domain.get("distance") or 0) / (p.domain.get("threshold") or 1)})
    return pd.DataFrame(out)


RULES = {
    "no widening": lambda r: np.ones_like(r),
    "as shipped (ratio)": lambda r: np.maximum(r, 1.0),
    "capped at 2": lambda r: np.clip(r, 1.0, 2.0),
    "1 + ln(ratio)": lambda r: 1.0 + np.log(np.maximum(r, 1.0)),
}


def main(path: str) -> None:
    rows = pd.read_parquet(path) if Path(path).exists() else collect()
    rows.to_parquet(path)
    # the band before widening: low = v (low1 / v) ** w, so low1 = v (low / v) ** (1 / w)
    w = rows["widen"].to_numpy()
    v, m = rows["value"].to_numpy(), rows["measured"].to_numpy()
    lo1, hi1 = (v * (rows[c].to_numpy() / v) ** (1.0 / w) for c in ("low", "high"))
    print(f"{len(rows)} rows, {int(rows['extrapolates'].sum())} flagged; ratio distance/threshold of the flagged: "
          f"median {rows.loc[rows['extrapolates'], 'ratio'].median():.2f}, max {rows['ratio'].max():.2f}")
    print("| rule | target | flagged: covered | width | others: covered | width |")
    for name, rule in RULES.items():
        e = rule(rows["ratio"].to_numpy())
        lo, hi = v * (lo1 / v) ** e, v * (hi1 / v) ** e
        for t in TARGETS:
            cells = []
            for flagged in (True, False):
                k = (rows["target"] == t).to_numpy() & (rows["extrapolates"].to_numpy() == flagged)
                cov = float(np.mean((lo[k] <= m[k]) & (m[k] <= hi[k])) * 100) if k.any() else float("nan")
                cells += [f"{cov:.0f}% ({int(k.sum())})", f"x{np.median(hi[k] / lo[k]):.2f}" if k.any() else "-"]
            print(f"| {name} | {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main(sys.argv[1] if len(sys.argv) > 1 else "artifacts/interval_widening.parquet")
