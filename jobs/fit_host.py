"""The step model's default host figures (us per kernel, forward and backward) solved from the
host-bound steps of the GPU campaign's rows (trappm_ray/model/launch.py: fit_host_us), written
with their provenance to trappm_ray/data/host_model.json.

    .venv/bin/python jobs/fit_host.py            (every campaign folder under data/labels, ~3 min)
"""
import json
import logging
import time
from dataclasses import dataclass

from trappm_ray import devices
from trappm_ray.config_cli import parse_config
from trappm_ray.evaluate.campaign import campaign_rows, host_rows, joined_graphs
from trappm_ray.labels.campaign_import import is_campaign_device
from trappm_ray.labels.store import device_slugs
from trappm_ray.model.launch import fit_host_us
from trappm_ray.physics.step_model import HOST_MODEL, REFERENCE_HOST_US


@dataclass
class FitHostConfig:
    labels: str = "data/labels"
    out: str = str(HOST_MODEL)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(FitHostConfig, description=__doc__)
    slugs = [slug for slug in device_slugs(cfg.labels) if is_campaign_device(cfg.labels, slug)]
    rows, hosts = [], []
    for gpu, found in campaign_rows(cfg.labels, slugs).items():
        rows += host_rows(found, joined_graphs(cfg.labels, found), devices.get(gpu))
        hosts.append(gpu)
    if not rows:
        raise SystemExit(f"no GPU campaign rows under {cfg.labels}: nothing to fit")
    fit = fit_host_us(rows)
    fit.update({"reference_host_us": REFERENCE_HOST_US, "fitted_on": f"the GPU campaign's rows on {', '.join(hosts)} "
                f"({', '.join(slugs)})", "date": time.strftime("%Y-%m-%d"), "command": "python jobs/fit_host.py"})
    with open(cfg.out, "w") as fh:
        json.dump(fit, fh, indent=1)
    print(json.dumps(fit, indent=1))
