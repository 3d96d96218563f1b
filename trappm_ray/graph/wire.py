"""Reading ONNX files at the protobuf wire level, before (or instead of) parsing them.

Two things need the file's structure without protobuf's parser:

* :func:`read_without_weights` reads a model file field by field and skips the payload of large
  initializers (their ``raw_data``/``float_data``...), keeping name, dims and type. The
  featurizer needs shapes, not values, so a 650 MB GPT-2 file becomes a few hundred kB to parse,
  and peak memory stays near the size of the graph's structure instead of twice the file.
* :func:`graph_nesting` measures how deeply sub-graphs (If/Loop/Scan bodies) nest, to tell a
  file that protobuf refused for its recursion limit from a corrupt one.

Field numbers are those of onnx.proto (ModelProto.graph = 7, GraphProto.node = 1 and
.initializer = 5, NodeProto.attribute = 5, AttributeProto.g = 6 and .graphs = 11,
ModelProto.functions = 25, FunctionProto.node = 7; TensorProto data fields 4-7, 9-11).
"""
from __future__ import annotations

import io
import logging

from trappm_ray import errors

log = logging.getLogger(__name__)

# Initializers whose encoding is above this are read as stubs. A value shape arithmetic could
# read (at most 4096 elements of 8 bytes) is far below it.
STRIP_BYTES = 256 * 2**10
_TENSOR_DATA_FIELDS = {4, 5, 6, 7, 9, 10, 11}
_MODEL_GRAPH, _MODEL_FUNCTIONS, _GRAPH_INIT = 7, 25, 5


class WireError(ValueError):
    """The bytes are not valid protobuf wire format."""


def _varint(read) -> int | None:
    """One varint from a ``read(n)`` callable; None at a clean end of input."""
    shift = result = 0
    for i in range(10):
        b = read(1)
        if not b:
            if i == 0:
                return None
            raise WireError("truncated varint")
        result |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return result
        shift += 7
    raise WireError("varint too long")


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _fields(f, end: int):
    """Yield ``(field, wire_type, tag_bytes, payload_start, payload_len)`` up to offset ``end``.

    For varint and fixed fields the payload is read past (payload_len is its byte count, the
    caller re-reads it if needed); length-delimited payloads are left unread at payload_start.
    """
    while f.tell() < end:
        start = f.tell()
        tag = _varint(f.read)
        if tag is None:
            return
        field, wt = tag >> 3, tag & 7
        if field == 0:
            raise WireError("field number 0")
        if wt == 2:
            length = _varint(f.read)
            if length is None or f.tell() + length > end:
                raise WireError("length past the end of its message")
            tag_len = f.tell() - start
            f.seek(start)
            yield field, wt, f.read(tag_len), start + tag_len, length
            f.seek(start + tag_len + length)
            continue
        if wt == 0:
            if _varint(f.read) is None:
                raise WireError("truncated varint")
        elif wt in (1, 5):
            f.seek(f.tell() + (8 if wt == 1 else 4))
        else:  # groups (3, 4) are not used by onnx.proto
            raise WireError(f"wire type {wt}")
        if f.tell() > end:
            raise WireError("field past the end of its message")
        size = f.tell() - start
        f.seek(start)
        yield field, wt, f.read(size), start + size, 0
        f.seek(start + size)


def _stub_tensor(f, start: int, length: int) -> tuple[bytes, int]:
    """A TensorProto without its data fields; also the bytes dropped."""
    f.seek(start)
    kept, dropped = [], 0
    for field, wt, head, pstart, plen in _fields(f, start + length):
        if field in _TENSOR_DATA_FIELDS:
            dropped += len(head) + plen
            continue
        kept.append(head if wt != 2 else head + f.read(plen))
    return b"".join(kept), dropped


def _copy(f, start: int, length: int) -> bytes:
    f.seek(start)
    data = f.read(length)
    if len(data) != length:
        raise WireError("truncated")
    return data


def _graph_without_weights(f, start: int, length: int, strip_bytes: int) -> tuple[bytes, int]:
    parts, dropped = [], 0
    f.seek(start)
    for field, wt, head, pstart, plen in _fields(f, start + length):
        if field == _GRAPH_INIT and wt == 2 and plen > strip_bytes:
            stub, n = _stub_tensor(f, pstart, plen)
            parts.append(_retag(head, len(stub)) + stub)
            dropped += n
        else:
            parts.append(head + (_copy(f, pstart, plen) if wt == 2 else b""))
    return b"".join(parts), dropped


def _retag(head: bytes, new_len: int) -> bytes:
    """``head`` (tag + old length varint) with the length replaced."""
    i = 0
    while head[i] & 0x80:  # skip the tag varint
        i += 1
    return head[: i + 1] + _encode_varint(new_len)


def read_without_weights(f: io.BufferedIOBase, size: int,
                         strip_bytes: int = STRIP_BYTES) -> tuple[bytes, int]:
    """The serialized model in ``f`` (``size`` bytes) with large initializers' data left out.

    Returns the reduced bytes (parse them with protobuf as usual) and the number of bytes of
    weight data skipped. Raises :class:`WireError` on bytes that are not protobuf.
    """
    parts, dropped = [], 0
    f.seek(0)
    for field, wt, head, pstart, plen in _fields(f, size):
        if field == _MODEL_GRAPH and wt == 2:
            graph, dropped = _graph_without_weights(f, pstart, plen, strip_bytes)
            parts.append(_retag(head, len(graph)) + graph)
        else:
            parts.append(head + (_copy(f, pstart, plen) if wt == 2 else b""))
    if dropped:
        log.debug("left %d bytes of weight data unread", dropped)
    return b"".join(parts), dropped


def graph_nesting(data: bytes, limit: int = 1000) -> int:
    """How many graphs deep sub-graphs nest (the main graph is 1); best effort on bad bytes.

    Walks only graph -> node -> attribute -> graph(s) (and functions' nodes), with an explicit
    stack, so a hostile file cannot make this recurse; stops counting at ``limit``.
    """
    f = io.BytesIO(data)
    # (start, length, kind, graph depth); kinds: model, graph, node, attr, function
    stack = [(0, len(data), "model", 0)]
    deepest = 0
    step = {"model": {_MODEL_GRAPH: "graph", _MODEL_FUNCTIONS: "function"},
            "function": {7: "node"}, "graph": {1: "node"}, "node": {5: "attr"},
            "attr": {6: "graph", 11: "graph"}}
    try:
        while stack:
            start, length, kind, depth = stack.pop()
            f.seek(start)
            for field, wt, _, pstart, plen in list(_fields(f, start + length)):
                child = step[kind].get(field) if wt == 2 else None
                if child is None:
                    continue
                d = depth + (child == "graph")
                deepest = max(deepest, d)
                if d < limit:
                    stack.append((pstart, plen, child, d))
    except WireError:
        pass
    return deepest


def too_deep_error(data: bytes, min_depth: int = 20) -> errors.TooDeeplyNested | None:
    """The error to report for bytes protobuf refused, when nesting is the likely reason."""
    depth = graph_nesting(data)
    if depth >= min_depth:
        return errors.TooDeeplyNested(
            f"sub-graphs (If/Loop/Scan bodies) nest {depth} deep; protobuf refuses messages "
            "nested past 100 levels (about 30 graphs), and control flow is not featurized")
    return None
