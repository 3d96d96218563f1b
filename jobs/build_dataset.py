"""Build the graph corpus (timm, torchvision, transformers LMs -> ONNX skeletons -> graphs) with Ray.

Full unlabeled corpus (~30k graphs, resumable; re-run the same command to continue):
    python jobs/build_dataset.py --out artifacts/corpus
On a cluster, to S3:
    ray job submit --working-dir . -- python jobs/build_dataset.py --out s3://bucket/corpus
Small demo:
    python jobs/build_dataset.py --out artifacts/demo/corpus --archs resnet18,vit_tiny_patch16_224 --resolutions 64
Exactly the keys of the public GPU labels (each (arch, resolution) at its labeled batch sizes),
then their graphs appended to data/labels/graphs.parquet:
    python jobs/build_dataset.py --out artifacts/corpus-gpu --keys-from public --meta-init true \\
        --num-cpus 1 --join-labels data/labels
(``--keys-from labels --labels data/labels`` reads the keys from the label store instead;
``--groups timm-train,timm-infer,hf,torchvision`` picks task groups.)
"""
import json
import logging
from dataclasses import asdict

from trappm_ray.config_cli import parse_config
from trappm_ray.corpus.build import DatasetConfig
from trappm_ray.labels.label_join import build_labeled, extend_joined_graphs

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = parse_config(DatasetConfig, description=__doc__)
    summary = build_labeled(cfg)
    print(json.dumps(asdict(summary), indent=1))
    if cfg.join_labels:
        joined = extend_joined_graphs(cfg.join_labels, cfg.out)
        joined["missing"] = {reason: keys[:20] for reason, keys in joined["missing"].items()}
        print(json.dumps(joined, indent=1, default=str))
