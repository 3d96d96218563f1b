"""Typed errors for bad model input.

Every error a user's file (or a request's options) can cause is a :class:`ModelError`: the CLI
prints its one-line message, the server answers it with ``status`` (4xx), and the batch job
stores it as an error row.
"""
from __future__ import annotations


class ModelError(ValueError):
    """A model file that cannot be featurized. ``code`` names the problem, ``status`` is HTTP."""

    code = "invalid_model"
    status = 422

    def __str__(self) -> str:
        # Node and tensor names come from the untrusted file: keep the message one printable line.
        msg = "".join(c if c.isprintable() else repr(c)[1:-1] for c in super().__str__())
        return f"{self.code}: {msg[:500]}"


class CorruptModel(ModelError):
    """The bytes are not a parseable ONNX protobuf."""

    code = "corrupt_protobuf"
    status = 400


class NotAModel(ModelError):
    """The protobuf parsed but holds no ONNX model (no graph, no opset)."""

    code = "not_a_model"
    status = 400


class EmptyGraph(ModelError):
    """The model's graph has no operator nodes."""

    code = "empty_graph"


class TooLarge(ModelError):
    """The file or its graph exceeds a configured limit."""

    code = "too_large"
    status = 413


class NoDataPath(ModelError):
    """No graph output depends on the values of an input, only on shapes or constants.

    Such a graph has nothing to train or run (its work is shape arithmetic), and it is the form
    of a shape bomb: a huge tensor built from an input's shape whose values nothing reads.
    """

    code = "no_data_path"


class ExternalData(ModelError):
    """The model references external tensor data in a way that is refused."""

    code = "external_data"


class CycleError(ModelError):
    """The graph is not a DAG."""

    code = "cycle"


class UnsupportedConstruct(ModelError):
    """The graph uses something the featurizer does not handle (control flow, bad opset, ...)."""

    code = "unsupported"


class UnresolvedShapes(ModelError):
    """Tensor shapes cannot be determined (symbolic inputs, ops without shape inference)."""

    code = "unresolved_shapes"


class TooSlow(TooLarge):
    """Featurizing ran past its time limit (a graph that is costly to analyse, not to run)."""

    code = "timeout"


class TooDeeplyNested(ModelError):
    """Sub-graphs (If/Loop/Scan bodies) nest deeper than protobuf or the featurizer allows.

    Protobuf refuses messages nested past its recursion limit (100 levels, about 30 graphs deep
    once node and attribute levels are counted); that is a limit, not corruption.
    """

    code = "too_deeply_nested"


class FixedBatch(UnsupportedConstruct):
    """The batch size is baked into the graph in a way that cannot be re-bound soundly."""

    code = "fixed_batch"


class BadOption(ModelError):
    """A prediction option out of its range (batch size 0, a negative price): the same code and
    message from the CLI, the API, the HTTP app and the batch job."""

    code = "bad_options"
    status = 400


class UnsupportedOption(ModelError):
    """A prediction option (precision, optimizer, GPUs, memory format) the device's predictor was
    never trained on: refused rather than silently ignored."""

    code = "unsupported_option"
    status = 400
