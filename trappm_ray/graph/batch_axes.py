"""Which axis of every tensor of a featurized graph carries the batch, proven op by op.

The proof behind :mod:`trappm_ray.graph.rebatch`: walking the inferred model in graph order,
each tensor either carries the batch in one axis (its size there a multiple of the batch, the
rest fixed) or does not depend on it. A transpose moves that axis, a reshape keeps it where its
target says (a dimension computed from the input's shape, a copied one, or the one ``-1``
left), a matrix product keeps it in a stacking axis, A's rows or B's columns. The shape vectors
a dynamic export computes (``Shape -> Gather -> Concat -> Reshape``) are followed element by
element: which elements are the batch (times a constant), which are fixed numbers.

:class:`Refused` is raised wherever that is not proven: an operator not known to keep the batch
in one axis (recurrent cells, einsum, resize, a custom domain), one that reduces, slices,
gathers or concatenates along the batch axis, a shape value not followed feeding a reshape,
expand or slice, a constant target that fixes the batch, or a statistic over the batch.
"""
from __future__ import annotations

import math

import onnx
from onnx import helper

from trappm_ray.graph.shape_rules import BROADCAST, SAME_SHAPE
from trappm_ray.graph.shape_values import SHAPE_ARITH, Elem, constants, evaluate

WINDOW = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
          "GlobalLpPool", "BatchNormalization", "InstanceNormalization", "DepthToSpace", "SpaceToDepth"}
NO_ATTRS = (WINDOW | SAME_SHAPE | {"Constant"}) - {"LayerNormalization"}  # ops no rule here reads an attribute of
REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1"}
# ops whose output's shape an input's values decide (beyond the shape arithmetic followed)
VALUE_SHAPED = {"Range", "Tile", "Slice", "Pad", "OneHot", "TopK", "NonZero", "Split", "Resize", "Upsample",
                "Expand", "Reshape", "ConstantOfShape", "Squeeze", "Unsqueeze", "Compress", "CenterCropPad"}


class Refused(Exception):
    """Some tensor's batch axis could not be proven."""


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class BatchAxes:
    """The walk over one inferred model ``m`` featurized at batch ``b0`` (:meth:`visit` each
    node in graph order; :class:`Refused` where the proof fails). ``axis`` maps every tensor that
    carries the batch to its axis."""

    def __init__(self, m, b0: int):
        self.m, self.b0, self.shapes = m, b0, m.shapes
        self.consts = constants(m.model, (onnx.TensorProto.INT64, onnx.TensorProto.INT32))
        self.scales = constants(m.model, (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE), float)  # Resize's
        self.axis: dict[str, int] = {x: 0 for x in m.data_inputs}  # tensor -> its batch axis
        self.tags: dict[str, list[Elem]] = {}  # shape vectors that hold the batch as a value
        self.unknown: set[str] = set()  # values that depend on the batch in ways not followed

    def rank(self, x: str) -> int:
        return len(self.shapes.get(x, ()))

    def values(self, x: str) -> list[Elem] | None:
        """``x``'s elements (tagged, or constant), None where not known."""
        if x in self.tags:
            return self.tags[x]
        if x in self.consts:
            return [(None, v) for v in self.consts[x]]
        return None

    def visit(self, node: onnx.NodeProto, ins: list[str] | None = None, outs: list[str] | None = None) -> None:
        """Follow the batch through ``node`` (``ins``/``outs``: its input and nonempty output
        names, where the caller has them)."""
        ins = list(node.input) if ins is None else ins
        outs = [x for x in node.output if x] if outs is None else outs
        op, axis = node.op_type, self.axis
        # the common case first, as out_axes would decide it: an elementwise op or a window over
        # the batch-first tensor its first input is, no other input carrying the batch
        if ins and ins[0] in axis and node.domain in ("", "ai.onnx") and (
                op in SAME_SHAPE and len(outs) == 1 or op in WINDOW and axis[ins[0]] == 0 and not (
                    self.tags or self.unknown) and not any(x in axis for x in ins[1:])):
            for out in outs:
                self.carry(out, axis[ins[0]])
            return
        # attributes where a rule reads them (parsing every node's costs more than the rest of the walk)
        a = _attrs(node) if node.attribute and node.op_type not in NO_ATTRS else {}
        scaled = [bool(x) and x in self.axis for x in ins]
        # shape values are rare (dynamic exports): most graphs never look them up
        valued = [bool(x) and (x in self.tags or x in self.unknown) for x in ins] if self.tags or self.unknown else []
        if node.op_type in ("Shape", "Size") and not any(scaled) and ins and ins[0] in self.shapes:
            s = list(self.shapes[ins[0]])  # the shape of a batch-free tensor (or of a shape vector)
            self.consts[outs[0]] = s[int(a.get("start", 0)):a.get("end")] if node.op_type == "Shape" \
                else [math.prod(s)]
            return
        if not any(scaled) and not any(valued):
            if outs and node.op_type in SHAPE_ARITH and all(x in self.consts for x in ins if x):
                found = evaluate(node.op_type, a, ins, self.values, self.consts)
                if found is not None and len(outs) == 1:
                    self.consts[outs[0]] = [v for _, v in found]
            return
        if node.domain not in ("", "ai.onnx"):
            raise Refused
        if not any(scaled):
            self.shape_values(node, a, ins, outs)
            return
        for out, ax in zip(outs, self.out_axes(node, a, ins, scaled)):
            self.carry(out, ax)

    def carry(self, x: str, ax: int) -> None:
        """Record that ``x`` carries the batch in axis ``ax`` (whose size must be a multiple of it)."""
        s = self.shapes.get(x)
        if not s or not 0 <= ax < len(s) or s[ax] % self.b0:
            raise Refused
        self.axis[x] = ax

    def shape_values(self, node, a: dict, ins: list[str], outs: list[str]) -> None:
        """A node on shape values alone: followed element by element where it can be, else its
        outputs are marked unknown (refused if they ever decide a shape)."""
        op = node.op_type
        if op == "ConstantOfShape":
            found = self.values(ins[0])
            tagged = [j for j, (k, _) in enumerate(found or []) if k is not None]
            if found is None or len(tagged) != 1:
                raise Refused
            self.carry(outs[0], tagged[0])
            return
        if op in ("Reshape", "Expand") and ins[0] not in self.tags and ins[0] not in self.unknown:
            if op == "Reshape":
                raise Refused  # a batch-free tensor reshaped to a batch-sized shape
            self.carry(outs[0], self.expand_axis(ins, None))
            return
        if op == "Range":  # range(0, k x batch, 1): a tensor of the batch's length
            start, limit, delta = (self.values(x) for x in ins[:3])
            if start != [(None, 0)] or delta != [(None, 1)] or not limit or limit[0][0] is None:
                raise Refused
            self.carry(outs[0], 0)
            return
        got = evaluate(op, a, ins, self.values, self.consts) if op in SHAPE_ARITH else None
        if got is None and (op in VALUE_SHAPED or op not in SAME_SHAPE | BROADCAST | SHAPE_ARITH):
            raise Refused  # an output whose shape the batch's value may decide
        if got is None:
            self.unknown.update(outs)
        elif all(k is None for k, _ in got):
            self.consts[outs[0]] = [v for _, v in got]
        else:
            self.tags[outs[0]] = got

    def expand_axis(self, ins: list[str], ax: int | None) -> int:
        """The batch axis of ``Expand(x, target)``, ``x`` carrying it at ``ax`` (None: not)."""
        tgt = self.values(ins[1]) if len(ins) > 1 else None
        if tgt is None:
            raise Refused
        rx = self.rank(ins[0])
        r = max(rx, len(tgt))
        if ax is not None:
            out = ax + r - rx
            j = out - (r - len(tgt))
            if j >= 0 and tgt[j][0] is None and tgt[j][1] != 1:
                raise Refused  # a constant target fixes the batch dimension
            return out
        tagged = [j for j, (k, _) in enumerate(tgt) if k is not None]
        if len(tagged) != 1:
            raise Refused
        out = tagged[0] + r - len(tgt)
        jx = out - (r - rx)
        if jx >= 0 and self.shapes[ins[0]][jx] != 1:
            raise Refused
        return out

    def reshape_axis(self, a: dict, ins: list[str], ax: int) -> int:
        """The batch axis of ``Reshape(x, target)``, ``x`` carrying it at ``ax``: the one element
        of the target computed from the batch, or copying it (0), else the one left (-1)."""
        tgt = self.values(ins[1])
        if tgt is None or a.get("allowzero"):
            raise Refused
        explicit = [j for j, (k, v) in enumerate(tgt) if k is not None or (v == 0 and j == ax)]
        rest = [j for j, (k, v) in enumerate(tgt) if k is None and v == -1]
        if len(explicit) == 1:
            return explicit[0]
        if not explicit and len(rest) == 1:
            return rest[0]
        raise Refused

    def out_axes(self, node, a: dict, ins: list[str], scaled: list[bool]) -> list[int]:
        """Per output, the axis that carries the batch, for a node with batch-carrying inputs."""
        op, n_out = node.op_type, len([x for x in node.output if x])
        axes = [self.axis[x] if s else -1 for x, s in zip(ins, scaled)]
        ax, rank = axes[0], self.rank(ins[0])
        shape_inputs = {"Reshape": 1, "Expand": 1}.get(op)  # the one input a shape value may feed
        if (self.tags or self.unknown) and any(
                x in self.tags or x in self.unknown for i, x in enumerate(ins) if x and i != shape_inputs
                and op not in BROADCAST and op not in SAME_SHAPE):
            raise Refused  # a shape value followed nowhere else decides this node
        if op in ("Shape", "Size"):
            s = self.shapes[ins[0]]
            elems = [(s[j] // self.b0 if j == ax else None, s[j]) for j in range(len(s))] if op == "Shape" \
                else [(math.prod(s) // self.b0, math.prod(s))]
            if op == "Shape":
                elems = elems[int(a.get("start", 0)):a.get("end")]
            self.tags[node.output[0]] = elems
            return []
        if op in SAME_SHAPE:
            if n_out > 1 and op != "Dropout" and not (
                    op == "LayerNormalization" and int(a.get("axis", -1)) % rank > ax):
                raise Refused  # statistics over the batch (training-mode BatchNorm, a LayerNorm across it)
            return [ax] * n_out
        if op in BROADCAST:
            r = self.rank(node.output[0])
            out = {x_ax + r - self.rank(x) for x, x_ax in zip(ins, axes) if x_ax >= 0}
            if len(out) != 1:
                raise Refused
            o = out.pop()
            if not 0 <= o < r:
                raise Refused
            for x, x_ax in zip(ins, axes):  # a batch-free operand broadcasts along the batch axis
                if x and x_ax < 0 and 0 <= o - (r - self.rank(x)) and self.shapes[x][o - (r - self.rank(x))] != 1:
                    raise Refused
            return [o] * n_out
        if op in WINDOW:
            if any(scaled[1:]) or ax != 0:
                raise Refused
            return [0] * n_out
        if op == "Gemm":
            if any(scaled[1:]) or ax != (1 if a.get("transA") else 0):
                raise Refused
            return [0]
        if op == "MatMul":
            return [self.matmul_axis(ins, axes, node.output[0])]
        if op == "Transpose":
            perm = a.get("perm") or list(range(rank))[::-1]
            return [list(perm).index(ax)]
        if op == "Flatten":
            return [0 if ax < int(a.get("axis", 1)) % max(rank, 1) else 1]
        if op == "Reshape":
            return [self.reshape_axis(a, ins, ax)]
        if op == "Expand":
            return [self.expand_axis(ins, ax)]
        if op == "Concat":  # every part carries the batch in the same axis, joined along another
            if not all(scaled) or len(set(axes)) != 1 or int(a["axis"]) % rank == ax:
                raise Refused
            return [ax]
        if op == "Split":
            if any(scaled[1:]) or int(a.get("axis", 0)) % rank == ax:
                raise Refused
            return [ax] * n_out
        if op in ("Resize", "Upsample"):  # a scale of exactly 1 on the batch axis; sizes would fix it
            scales = self.scales.get(ins[2 if op == "Resize" else 1]) if len(ins) > (2 if op == "Resize" else 1) else None
            if scales is None or len(ins) > 3 and ins[3] or any(scaled[1:]) or scales[ax] != 1.0:
                raise Refused
            return [ax]
        if op == "Pad":  # pads that do not depend on the batch add a fixed size: none on its axis
            if any(scaled[1:]) or len(ins) > 3 and ins[3] or self.shapes[node.output[0]][ax] != self.shapes[ins[0]][ax]:
                raise Refused
            return [ax]
        if op == "Gather":
            axis = int(a.get("axis", 0)) % rank if rank else 0
            if scaled[0] and len(scaled) > 1 and scaled[1] or (scaled[0] and axis == ax):
                raise Refused
            if scaled[0]:
                return [ax if ax < axis else ax - 1 + self.rank(ins[1])]
            return [axis + axes[1]]  # indices carry the batch: an embedding lookup
        if op in ("Slice", "Squeeze", "Unsqueeze") or op in REDUCE:
            index = 3 if op == "Slice" else 1
            out_rank = self.rank(node.output[0])
            listed = a.get("axes")
            if listed is None and len(ins) > index and ins[index]:
                listed = self.consts.get(ins[index])
            if listed is None or any(scaled[1:]):
                raise Refused
            if op == "Unsqueeze":
                kept = [j for j in range(out_rank) if j not in {v % out_rank for v in listed}]
                return [kept[ax]]
            listed = [v % rank for v in listed]
            if ax in listed:
                raise Refused
            if op == "Slice" or (op in REDUCE and a.get("keepdims", 1)):
                return [ax]
            return [ax - sum(v < ax for v in listed)]
        raise Refused

    def matmul_axis(self, ins: list[str], axes: list[int], out: str) -> int:
        """MatMul keeps the batch in a broadcast (stacking) axis, or in A's rows or B's columns;
        an axis the product sums over is refused."""
        r = self.rank(out)
        found: set[int] = set()
        for i, (x, x_ax) in enumerate(zip(ins[:2], axes[:2])):
            if x_ax < 0:
                continue
            rx = self.rank(x)
            if rx < 2 or x_ax == (rx - 1 if i == 0 else rx - 2):
                raise Refused
            found.add(x_ax + r - rx)
        if len(found) != 1:
            raise Refused
        axis = found.pop()
        if len([a for a in axes[:2] if a >= 0]) == 2 and axis >= r - 2:
            raise Refused  # both operands' batch where the product pairs rows with columns
        return axis


__all__ = ["Refused", "BatchAxes", "Elem"]
