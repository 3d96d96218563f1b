"""Stand-in for the ``inplace_abn`` package (activated batch norm, a CUDA extension) when old timm
architectures (``*_iabn``) are exported for their graphs only: on the path of the legacy-timm
build (``scripts/legacy_timm_graphs.sh``), never imported by the product."""
