"""Import the public GPU measurements (timm, NeuSight, ryujaehun; vTrain, Pollux, Gavel; Zeus) into label device folders.

    .venv/bin/python jobs/import_labels.py                      (../shared/data/public-gpu -> data/labels)
    .venv/bin/python jobs/import_labels.py --root ../shared/data/public-gpu --out data/labels \
        --sources timm,neusight,ryujaehun

Writes ``<out>/<slug>/labels.parquet`` (compact, one row per key) and ``<out>/<slug>/raw/runs.parquet``
(one row per source measurement) for every imported device, replacing an earlier import of that
device; then ``python jobs/label_datasheet.py --all true`` writes their datasheets.

    .venv/bin/python jobs/import_labels.py --root ../shared/data/public-distributed --out data/labels-distributed \
        --sources vtrain,pollux,gavel                           (multi-GPU runs, a store of their own)
    .venv/bin/python jobs/import_labels.py --root ../shared/data/public-power --out data/labels-power \
        --sources zeus                                          (power under power limits, a store of its own)
    .venv/bin/python jobs/import_labels.py --campaign-run DIR   (a GPU campaign run, docs/gpu-campaign.md)

adds the rows a GPU slot measured (``rows.jsonl``, ``run.json`` in DIR) to ``<gpu>-<regime>`` folders. What the rows mean:
``trappm_ray/labels/public.py`` and the datasheets ``docs/labels_<slug>.md``.
"""
import logging
import os
from dataclasses import dataclass

from trappm_ray.config_cli import parse_config
from trappm_ray.labels.campaign_import import import_run
from trappm_ray.labels.campaign_instruments import ROWS_FILE
from trappm_ray.labels.public import import_public

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class ImportConfig:
    root: str = os.path.join(ROOT, "..", "shared", "data", "public-gpu")
    out: str = "data/labels"
    sources: tuple[str, ...] = ("timm", "neusight", "ryujaehun")
    imported: str | None = None  # date written to date_imported (default: today, UTC)
    campaign_run: str = ""  # a GPU campaign run directory: import it instead of the public sources


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_config(ImportConfig, description=__doc__)
    if cfg.campaign_run:
        if not os.path.isfile(os.path.join(cfg.campaign_run, ROWS_FILE)):
            raise SystemExit(f"error: {cfg.campaign_run} holds no {ROWS_FILE}: not a GPU campaign run's folder")
        for slug, counts in import_run(cfg.campaign_run, cfg.out, cfg.imported).items():
            print(f"{slug}: {dict(counts)}")
        raise SystemExit(0)
    print(import_public(os.path.normpath(cfg.root), cfg.out, cfg.sources, cfg.imported).text())
