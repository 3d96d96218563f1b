"""The GPU campaign's rows against the answers: the CUDA memory model against the measured peaks;
the step model alone, the spec-based predictor and the product's answer (`trappm-ray predict`)
against the measured step and inference times on the campaign's GPU (docs/gpu-campaign.md).

    .venv/bin/python jobs/evaluate_campaign.py            (every campaign folder under data/labels)

Writes docs/results-campaign.md and .json; needs the rows' graphs joined first
(docs/gpu-campaign.md: jobs/build_dataset.py --keys-from labels ... --join-labels data/labels).
"""
import json
import logging
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import trappm_ray
from trappm_ray.config_cli import parse_config
from trappm_ray.corpus.text_models import config_dict
from trappm_ray.evaluate.campaign import evaluate, evaluate_moves
from trappm_ray.evaluate.campaign_report import report
from trappm_ray.labels.campaign_import import is_campaign_device
from trappm_ray.labels.store import device_slugs
from trappm_ray.serving.model_input import model_bytes


def _model(row: dict) -> tuple[object, dict[str, int] | None]:
    """What a user passes for the row's model: the timm name, or a text model's ``config.json``
    (exported once per model, its sequence length a dim) with ``seq`` set to the row's."""
    if row["model_source"] != "transformers":
        return row["arch"], None
    if row["arch"] not in _TEXT_EXPORTS:
        path = Path(tempfile.mkdtemp()) / "config.json"
        path.write_text(json.dumps(config_dict(row["arch"])))
        _TEXT_EXPORTS[row["arch"]] = model_bytes(path)[0]
    return _TEXT_EXPORTS[row["arch"]], {"seq": int(row["seq_len"])}


_TEXT_EXPORTS: dict[str, bytes] = {}
log = logging.getLogger("evaluate_campaign")


def product_answer(row: dict, graph) -> dict | None:
    """What `trappm-ray predict <timm name or config.json> --device <the row's GPU>` answers for a
    row in its setting (text models at the row's sequence length)."""
    model, dims = _model(row)
    try:
        p = trappm_ray.predict(model, row["batch_size"], row["device_spec"],
                               resolution=None if dims else row["resolution"], dims=dims,
                               precision=row["precision"], optimizer=row["optimizer"],
                               memory_format=None if dims else row["memory_format"], recompute=row["recompute"] != "none",
                               grad_accum=int(row["grad_accum"]))
    except ValueError as e:  # an option or batch the product refuses
        log.info("no product answer for %s b%s: %s", row["arch"], row["batch_size"], e)
        return None
    banded = {f"{t}{e}": getattr(getattr(p, t), k) for t in ("train_step_ms", "inference_ms", "train_power_w")
              if getattr(p, t) is not None for e, k in (("", "value"), ("_low", "low"), ("_high", "high"))}
    return {**banded, "inference_power_w": p.power["inference_power_w"]}


@dataclass
class CampaignEvalConfig:
    labels: str = "data/labels"
    out: str = "docs/results-campaign"  # .md and .json are written
    product: bool = True  # also the product's answer (exports each timm model once, ~1 s a row)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(CampaignEvalConfig, description=__doc__)
    product = product_answer if cfg.product else None
    slugs = [slug for slug in device_slugs(cfg.labels) if is_campaign_device(cfg.labels, slug)]
    evaluations = [evaluate(cfg.labels, slug, product=product) for slug in slugs]
    moves = evaluate_moves(cfg.labels, slugs)
    if not evaluations:
        print(f"no GPU campaign rows under {cfg.labels}: nothing to evaluate")
        raise SystemExit(0)
    with open(f"{cfg.out}.md", "w") as fh:
        fh.write(report(evaluations, moves))
    with open(f"{cfg.out}.json", "w") as fh:
        json.dump({"devices": [e.to_dict() for e in evaluations],
                   "moves": {gpu: {t: {g: asdict(e) for g, e in groups.items()} for t, groups in targets.items()}
                             for gpu, targets in moves.items()}}, fh, indent=1)
    print(report(evaluations, moves))
