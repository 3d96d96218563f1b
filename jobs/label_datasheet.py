"""Write docs/labels_<device>.md, the datasheet of a device's committed labels.

    python jobs/label_datasheet.py                      (the device with the most labels)
    python jobs/label_datasheet.py --device intel-r-xeon-r-processor-t1 --out docs
    python jobs/label_datasheet.py --all true           (every device under --labels)

Devices imported by jobs/import_labels.py get the imported-device datasheet (sources, what the
numbers mean, torch-version noise).
"""
import os
from dataclasses import dataclass

from trappm_ray.config_cli import parse_config
from trappm_ray.labels.datasheet import datasheet
from trappm_ray.labels.store import default_slug, device_slugs


@dataclass
class DatasheetConfig:
    labels: str = "data/labels"
    device: str = ""
    out: str = "docs"
    all: bool = False  # one datasheet per device directory under --labels


if __name__ == "__main__":
    cfg = parse_config(DatasheetConfig, description=__doc__)
    slugs = device_slugs(cfg.labels) if cfg.all else [cfg.device or default_slug(cfg.labels)]
    for slug in slugs:
        path = os.path.join(cfg.out, f"labels_{slug}.md")
        with open(path, "w") as f:
            f.write(datasheet(cfg.labels, slug))
        print(path)
