#!/usr/bin/env bash
# Graphs for the public GPU labels' architectures that the pinned timm no longer defines, each
# exported under the last released timm that does, installed alone into .legacy-timm/<version>
# (no dependencies: the project's torch) and put first on the path of the corpus build; their
# graph rows name that timm version in their exporter string. The *_iabn models get a stand-in
# for the inplace_abn CUDA extension (scripts/legacy_timm/inplace_abn: batch norm + activation).
# vit_base2_patch32_256, in no released timm, is built by the pinned timm from its recorded widths
# (trappm_ray.corpus.zoo.UNRELEASED). Every built graph of a labeled key is appended to
# data/labels/graphs.parquet.
#
#   bash scripts/legacy_timm_graphs.sh            # ~10 min on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
declare -A ARCHS=(
  [0.5.4]="cspdarknet53_iabn,cspresnext50_iabn"
  [0.6.5]="convnext_nano_hnf,convnext_tiny_hnfd,densenet121d,densenet264,densenet264d_iabn,ese_vovnet99b_iabn,gluon_xception65,resnetv2_50d_evob"
  [0.9.12]="vit_base_patch16_reg8_gap_256,vit_medium_patch16_reg4_256"
)
for version in 0.5.4 0.6.5 0.9.12; do
  target=.legacy-timm/$version
  [ -d "$target/timm" ] || "$PY" -m pip install -q --no-deps --target "$target" "timm==$version"
  PYTHONPATH="$target:scripts/legacy_timm" "$PY" jobs/build_dataset.py --out "artifacts/corpus-timm-$version" \
    --keys-from public --meta-init true --num-cpus 1 --retry-failed true --archs "${ARCHS[$version]}" --join-labels data/labels
done
"$PY" jobs/build_dataset.py --out artifacts/corpus-timm-dev --keys-from public --meta-init true --num-cpus 1 \
  --retry-failed true --archs vit_base2_patch32_256 --join-labels data/labels
