"""Copy a small committable sample (one small architecture per paper family) out of the corpus.

    python jobs/make_sample.py --corpus artifacts/corpus --out data/sample
"""
import argparse
import json

from trappm_ray.corpus.build import write_sample

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--corpus", default="artifacts/corpus")
    p.add_argument("--out", default="data/sample")
    p.add_argument("--per-family", type=int, default=1)
    args = p.parse_args()
    print(json.dumps(write_sample(args.corpus, args.out, args.per_family)))
