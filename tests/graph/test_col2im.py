"""Col2Im (ONNX opset 18, torch's ``F.fold``): shape and cost on a hand-built graph."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from trappm_ray.graph.featurize import featurize


def _col2im_model(channels=2, block=(2, 2), image=(4, 6), strides=(2, 2)) -> bytes:
    k = block[0] * block[1]
    blocks = (image[0] // strides[0]) * (image[1] // strides[1])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", channels * k, blocks])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(np.array(image, np.int64), "image_shape"),
             numpy_helper.from_array(np.array(block, np.int64), "block_shape")]
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], strides=list(strides))
    graph = helper.make_graph([node], "fold", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def test_col2im_output_shape_and_macs():
    g = featurize(_col2im_model(), batch_size=3)
    assert g.ops == ["Col2Im"]
    assert g.out_shape[0][:4].tolist() == [3, 2, 4, 6]
    assert g.macs[0] == 3 * 8 * 6  # one addition per input (column) element
    assert g.meta["opset"] == 18 and g.meta["unresolved_shapes"] == 0

