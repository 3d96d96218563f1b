"""TraPPM on Ray: predict the training cost of a deep learning model from its ONNX graph.

``trappm_ray.predict(model, batch_size=...)`` is the entry point (see
:func:`trappm_ray.serving.api.predict`); it is imported on first use so that ``import trappm_ray``
stays cheap and free of side effects.

Stages, in the order data flows (``docs/architecture.md``): :mod:`~trappm_ray.graph` (ONNX ->
graph), :mod:`~trappm_ray.corpus`, :mod:`~trappm_ray.labels`, :mod:`~trappm_ray.train`,
:mod:`~trappm_ray.evaluate`, :mod:`~trappm_ray.serving`; :mod:`~trappm_ray.model` holds the
networks and the predictor artifact.
"""


def __getattr__(name: str):
    if name == "predict":
        from trappm_ray.serving.api import predict

        return predict
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
