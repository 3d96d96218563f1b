"""TraPPM on Ray: predict the training cost of a deep learning model from its ONNX graph.

``trappm_ray.predict(model, batch_size=...)`` is the entry point (see :mod:`trappm_ray.predict`);
it is imported on first use so that ``import trappm_ray`` stays cheap and free of side effects.
"""


def __getattr__(name: str):
    if name == "predict":
        import importlib

        # The submodule is callable (it forwards to its predict function): importing it binds
        # the package attribute to the module, and both spellings must keep working.
        return importlib.import_module(".predict", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
