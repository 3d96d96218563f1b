"""Write docs/labels_<device>.md, the datasheet of a device's committed labels.

    python jobs/label_datasheet.py                      (the device with the most labels)
    python jobs/label_datasheet.py --device intel-r-xeon-r-processor-t1 --out docs
"""
import os
from dataclasses import dataclass

from trappm_ray.config_cli import parse_config
from trappm_ray.labels.datasheet import datasheet
from trappm_ray.labels.store import default_slug


@dataclass
class DatasheetConfig:
    labels: str = "data/labels"
    device: str = ""
    out: str = "docs"


if __name__ == "__main__":
    cfg = parse_config(DatasheetConfig, description=__doc__)
    slug = cfg.device or default_slug(cfg.labels)
    path = os.path.join(cfg.out, f"labels_{slug}.md")
    with open(path, "w") as f:
        f.write(datasheet(cfg.labels, slug))
    print(path)
