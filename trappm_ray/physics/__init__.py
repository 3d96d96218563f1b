"""Analytic models of training cost computed from a :class:`trappm_ray.graph.featurize.Graph`.

``memory``: CUDA training memory (weights, gradients, optimizer state, saved activations,
backward transients, workspace, caching-allocator rounding, CUDA context) with the three peak
definitions a GPU harness records; ``censored``: the check of that model against timm's public
RTX 3090 training rows (the largest batch that fitted in 24 GB).
"""
