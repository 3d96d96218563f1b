"""The GPU campaign's rows against the physics answers: the CUDA memory model against the measured
peaks, the spec-based step time on the campaign's GPU (docs/gpu-campaign.md).

    .venv/bin/python jobs/evaluate_campaign.py            (every campaign folder under data/labels)

Writes docs/results-campaign.md and .json; needs the rows' graphs joined first
(docs/gpu-campaign.md: jobs/build_dataset.py --keys-from labels ... --join-labels data/labels).
"""
import json
import logging
from dataclasses import dataclass

from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate.campaign import evaluate, report
from trappm_ray.labels.campaign_import import is_campaign_device
from trappm_ray.labels.store import device_slugs


@dataclass
class CampaignEvalConfig:
    labels: str = "data/labels"
    out: str = "docs/results-campaign"  # .md and .json are written


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(CampaignEvalConfig, description=__doc__)
    evaluations = [evaluate(cfg.labels, s) for s in device_slugs(cfg.labels) if is_campaign_device(cfg.labels, s)]
    if not evaluations:
        print(f"no GPU campaign rows under {cfg.labels}: nothing to evaluate")
        raise SystemExit(0)
    with open(f"{cfg.out}.md", "w") as fh:
        fh.write(report(evaluations))
    with open(f"{cfg.out}.json", "w") as fh:
        json.dump([e.to_dict() for e in evaluations], fh, indent=1)
    print(report(evaluations))
