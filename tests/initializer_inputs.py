"""Models whose initializers are also listed as graph inputs, as old exporters write them.

The classic model-zoo CNNs (onnx-caffe2, IR 3) list every initializer among the graph inputs, and
their light copies in onnx's test data put each weight behind a ``ConstantOfShape`` whose shape
is such an initializer. PyTorch's ``keep_initializers_as_inputs`` and early tf2onnx do the same
from IR 4 on, where it means the values are only defaults a caller may override.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)


def zoo_cnn(ir_version: int = 3, *, channels: int = 4, blocks: int = 2, light_weights: bool = True,
            head: bool = False) -> onnx.ModelProto:
    """data -> (Conv -> BN -> Relu) x blocks -> GlobalAveragePool, caffe2 style.

    With ``light_weights`` each conv weight is ``ConstantOfShape(shape)`` filled with one random
    value, ``shape`` an int64 initializer listed as an input (as in onnx's light zoo); BN
    parameters are random initializers, also listed as inputs. Node names are numbered like the
    zoo's (``n0``, ``n1``...). ``head`` adds a 1×1 Conv with no BN before the pool, whose weight
    no fold replaces.
    """
    nodes, inits = [], []
    x, c_in, k = "data_0", 3, 0
    for b in range(blocks):
        w_name = f"conv{b}_w_0"
        w = rng.normal(0, 0.5, (channels, c_in, 3, 3)).astype(np.float32)
        if light_weights:
            shape = f"{w_name}__SHAPE"
            inits.append(numpy_helper.from_array(np.array(w.shape, np.int64), shape))
            fill = numpy_helper.from_array(np.array([rng.uniform(0.05, 0.2)], np.float32), "")
            nodes.append(helper.make_node("ConstantOfShape", [shape], [w_name], value=fill))
        else:
            inits.append(numpy_helper.from_array(w, w_name))
        bn = [f"bn{b}_{p}" for p in ("s", "b", "rm", "riv")]
        values = [rng.uniform(0.5, 1.5, channels), rng.normal(0, 0.2, channels),
                  rng.normal(0, 0.5, channels), rng.uniform(0.5, 2.0, channels)]
        inits += [numpy_helper.from_array(v.astype(np.float32), n) for n, v in zip(bn, values)]
        nodes += [
            helper.make_node("Conv", [x, w_name], [f"conv{b}"], name=f"n{k}", pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", [f"conv{b}", *bn], [f"bn{b}"], name=f"n{k + 1}", epsilon=1e-5),
            helper.make_node("Relu", [f"bn{b}"], [f"relu{b}"], name=f"n{k + 2}"),
        ]
        x, c_in, k = f"relu{b}", channels, k + 3
    if head:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.5, (channels, channels, 1, 1)).astype(np.float32),
                                             "head_w"))
        nodes.append(helper.make_node("Conv", [x, "head_w"], ["head"], name=f"n{k}"))
        x, k = "head", k + 1
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool_1"], name=f"n{k}"))
    inputs = [helper.make_tensor_value_info("data_0", TensorProto.FLOAT, [1, 3, 8, 8])]
    inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    graph = helper.make_graph(nodes, "zoo", inputs,
                              [helper.make_tensor_value_info("pool_1", TensorProto.FLOAT, [1, channels, 1, 1])], inits)
    opset = 9 if ir_version < 4 else 13
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="onnx-caffe2")
    model.ir_version = ir_version
    return model
