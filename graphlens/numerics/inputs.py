"""Inputs for running a model: random ones from its declared types, or arrays from an ``.npz`` file.

A graph input is any entry of ``graph.input`` that is not also an initializer. Random values
are drawn from one ``numpy.random.Generator`` seeded with ``seed``, input by input in graph
order, so the same model, dims and seed always give identical arrays:
floats ~ N(0, 1) cast to the input's dtype, integers uniform on 0..9, bools fair coin flips.
An integer input that indexes a constant table (the ids of an embedding ``Gather``, directly or
through a Cast/Unsqueeze/Reshape) stays below the table's size, so a transformer's token ids run.

Some inputs break the run or the comparison when random, not just its realism: an attention mask of
0..9 overflows ``(1 - mask) · finfo.min`` into NaN on both sides, and a decoder's ``ReduceSum(mask) - 1``
then points past its KV cache. Those are drawn as what they hold in use (:func:`input_roles`):

- a **mask** (a name containing "mask", or an input read by ``Sub(1, ·)`` as masks are inverted) is
  1 everywhere in the first row of the batch; further rows end in a random run of 0s (padding), never
  all of them;
- **positions** (an integer input named like ``position_ids``) count 0, 1, 2… along the last axis.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from numpy.typing import ArrayLike

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.types import Dim, dtype_name, type_of_value_info
from graphlens.core.wellformed import KNOWN_ELEMENT_TYPES
from graphlens.numerics.dim_expressions import parse_dim_expression

BATCH_DEFAULT = 1
SYMBOL_DEFAULT = 16
UNKNOWN_DEFAULT = 1
_BATCH_EXACT = frozenset({"N", "n", "B", "b"})


def structure(model: Model | onnx.ModelProto) -> onnx.ModelProto:
    """The model's structure (inputs, initializer and Constant dims, nodes). An edited model's weightless copy:
    writing its graph into its protobuf would add a copy of every weight that protobuf keeps."""
    if not isinstance(model, Model):
        return model
    return model.weightless_proto() if model.graph.is_dirty else model.to_proto()


def graph_inputs(model: Model | onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller must feed: declared inputs that no initializer provides."""
    graph = structure(model).graph
    initialized = {t.name for t in graph.initializer}
    return [v for v in graph.input if v.name not in initialized]


def symbolic_dims(model: Model | onnx.ModelProto) -> list[str]:
    """Names of the symbolic dimensions of the graph inputs, in first-seen order; the names inside an
    expression (``s16 + s62``) follow it when no input uses them on their own."""
    names: list[str] = []
    for value in graph_inputs(model):
        for dim in type_of_value_info(value).shape or ():
            if isinstance(dim, str) and not is_unnamed(dim) and dim not in names:
                names.append(dim)
    for dim in list(names):
        expression = parse_dim_expression(dim)
        names += [name for name in (expression.names if expression else ()) if name not in names]
    return names


def is_unnamed(dim: Dim) -> bool:
    """A dynamic dim with no name: no value at all, an empty name, the name '?' (Paddle2ONNX writes
    that for several dims that are not tied), or a negative size (-1, from the same exporter)."""
    return dim is None or dim in ("", "?") or (isinstance(dim, int) and dim < 0)


def unnamed_label(input_name: str, axis: int) -> str:
    """How an unnamed dim is called in reports and in ``--dim``: ``x[2]`` is axis 2 of input ``x``."""
    return f"{input_name}[{axis}]"


def unnamed_dims(model: Model | onnx.ModelProto) -> list[str]:
    """Labels (see :func:`unnamed_label`) of the unnamed dynamic dims of the graph inputs."""
    return [
        unnamed_label(value.name, axis)
        for value in graph_inputs(model)
        for axis, dim in enumerate(type_of_value_info(value).shape or ())
        if is_unnamed(dim)
    ]


def is_batch_like(name: str) -> bool:
    """Batch dims default to 1 so a random run stays cheap and matches how models are exported."""
    return "batch" in name.lower() or name in _BATCH_EXACT


def _resolve_dim(dim: Dim, dims: dict[str, int], label: str) -> int:
    if dim is None or is_unnamed(dim):
        return dims.get(label, UNKNOWN_DEFAULT)
    if isinstance(dim, int):
        return dim
    if dim in dims:
        return dims[dim]
    expression = parse_dim_expression(dim)
    if expression is not None:  # computed from its names, so it agrees with the inputs that use them
        return max(expression.value({name: _resolve_dim(name, dims, name) for name in expression.names}), 0)
    return BATCH_DEFAULT if is_batch_like(dim) else SYMBOL_DEFAULT


def _element_type(value: onnx.ValueInfoProto) -> int:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise GraphLensError(
            f"input '{value.name}' is a {kind or 'value of unknown type'}, not a tensor; "
            "random inputs cover tensors only"
        )
    elem_type = value.type.tensor_type.elem_type
    if not elem_type:
        raise GraphLensError(f"input '{value.name}' declares no element type; give its values in an .npz file")
    if elem_type not in KNOWN_ELEMENT_TYPES:  # a model built in code, not loaded (loading refuses it)
        raise GraphLensError(f"input '{value.name}' has element type {elem_type}, which ONNX does not define")
    return elem_type


def check_dim_names(model: Model | onnx.ModelProto, dims: dict[str, int]) -> None:
    """Raise a one-line error for a dim name the model's inputs do not have, listing those they have."""
    known = symbolic_dims(model) + unnamed_dims(model)
    unknown = [name for name in dims if name not in known]
    if unknown:
        listed = ", ".join(known) if known else "none"
        raise GraphLensError(
            f"dimension '{unknown[0]}' is not a dynamic dimension of the model's inputs; "
            f"its dynamic dimensions are: {listed}"
        )


def make_inputs(
    model: Model | onnx.ModelProto, dims: dict[str, int] | None = None, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random inputs for the model's graph inputs, with the dtype and shape each declares.

    ``dims`` sizes symbolic dims by name and unnamed ones by label (``x[2]``); the rest take
    the defaults (batch-like 1, other symbolic 16, unnamed 1).
    """
    dims = dict(dims or {})
    check_dim_names(model, dims)
    rng = np.random.default_rng(seed)
    proto = structure(model)  # once: an edited model's structure is a copy
    bounds = index_bounds(proto)
    roles = input_roles(proto)
    arrays: dict[str, np.ndarray] = {}
    for value in graph_inputs(proto):
        elem_type = _element_type(value)
        declared = type_of_value_info(value).shape
        if declared is None:
            raise GraphLensError(f"input '{value.name}' declares no shape; give its values in an .npz file")
        shape = tuple(_resolve_dim(d, dims, unnamed_label(value.name, axis)) for axis, d in enumerate(declared))
        if value.name in roles.masks:
            arrays[value.name] = mask_values(rng, shape, _numpy_dtype(elem_type))
        elif value.name in roles.positions:
            arrays[value.name] = position_values(shape, _numpy_dtype(elem_type), bounds.get(value.name))
        else:
            arrays[value.name] = _random_array(rng, elem_type, shape, value.name, bounds.get(value.name, INT_HIGH))
    return arrays


INT_HIGH = 10
"""Random integers are drawn from 0 .. INT_HIGH - 1, or below a table's size where they index one."""
VALUE_PASS_THROUGH = frozenset({"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity"})
"""Ops whose output holds their first input's values as they are: an index fed through them still indexes, a
Softmax's probabilities still sum to 1."""


def index_bounds(model: Model | onnx.ModelProto) -> dict[str, int]:
    """Integer graph input -> the smallest size of a constant table it indexes through ``Gather`` (main graph).

    Reads only the tables' dims, so external weights stay on disk.
    """
    proto = structure(model)
    graph = proto.graph
    sizes = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
            sizes[node.output[0]] = list(node.attribute[0].t.dims)
    origin = input_origins(proto, VALUE_PASS_THROUGH)
    bounds: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] in origin and node.input[0] in sizes:
            dims = sizes[node.input[0]]
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if dims and -len(dims) <= axis < len(dims) and dims[axis] > 0:
                source = origin[node.input[1]]
                bounds[source] = min(bounds.get(source, INT_HIGH), int(dims[axis]))
    return bounds


# ------------------------------------------------------------------------------ input roles
_MASK_NAME = re.compile(r"mask", re.IGNORECASE)
_POSITION_NAME = re.compile(r"position", re.IGNORECASE)


@dataclass(frozen=True)
class InputRoles:
    """Inputs holding a mask, inputs holding positions; the rest are drawn at random."""

    masks: frozenset[str]
    positions: frozenset[str]

    def describe(self, name: str) -> str | None:
        """How a report names what was drawn for ``name`` when it has a role."""
        if name in self.masks:
            return "1s (a mask)"
        if name in self.positions:
            return "0, 1, 2… (positions)"
        return None


def input_origins(model: Model | onnx.ModelProto, keep: frozenset[str]) -> dict[str, str]:
    """Tensor -> the graph input it is, through ops in ``keep`` (main graph; nodes are in topological order)."""
    proto = structure(model)
    origin = {v.name: v.name for v in graph_inputs(proto)}
    graph = proto.graph
    for node in graph.node:
        if node.op_type in keep and node.input and node.input[0] in origin:
            for out in node.output[:1]:
                origin[out] = origin[node.input[0]]
    return origin


def _constant_scalars(graph: onnx.GraphProto) -> dict[str, float]:
    """Single-number initializers and Constants: the 1 of ``Sub(1, mask)``."""
    found: dict[str, float] = {}
    for tensor in graph.initializer:
        if int(np.prod(tensor.dims, dtype=np.int64)) == 1 and tensor.data_location != onnx.TensorProto.EXTERNAL:
            found[tensor.name] = float(onnx.numpy_helper.to_array(tensor).reshape(-1)[0])
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
            value = node.attribute[0].t
            if int(np.prod(value.dims, dtype=np.int64)) == 1:
                found[node.output[0]] = float(onnx.numpy_helper.to_array(value).reshape(-1)[0])
    return found


def input_roles(model: Model | onnx.ModelProto) -> InputRoles:
    """Which inputs hold a mask and which hold positions (see the module docstring)."""
    proto = structure(model)
    graph = proto.graph
    inputs = graph_inputs(proto)
    masks = {v.name for v in inputs if _MASK_NAME.search(v.name)}
    origin = input_origins(proto, VALUE_PASS_THROUGH)
    ones = {name for name, value in _constant_scalars(graph).items() if value == 1.0}
    for node in graph.node:
        if node.op_type == "Sub" and len(node.input) == 2 and node.input[0] in ones and node.input[1] in origin:
            masks.add(origin[node.input[1]])
    integer = {v.name for v in inputs if _is_integer(v)}
    positions = {v.name for v in inputs if _POSITION_NAME.search(v.name) and v.name in integer} - masks
    return InputRoles(frozenset(masks), frozenset(positions))


def _is_integer(value: onnx.ValueInfoProto) -> bool:
    elem = value.type.tensor_type.elem_type
    return elem in KNOWN_ELEMENT_TYPES and _numpy_dtype(elem).kind in "iu"


def _numpy_dtype(elem_type: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def mask_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """1s, with a random run of trailing 0s in each row past the first of the leading axis (never a whole row)."""
    values = np.ones(shape, dtype=np.float64)
    if len(shape) >= 2 and shape[-1] > 1:
        rows = values.reshape(shape[0], -1, shape[-1])
        for row in range(1, shape[0]):
            rows[row, :, shape[-1] - int(rng.integers(0, shape[-1] // 2 + 1)):] = 0
    if dtype.kind == "b":
        return values.astype(bool)
    return values.astype(dtype)


def position_values(shape: tuple[int, ...], dtype: np.dtype, bound: int | None) -> np.ndarray:
    """0, 1, 2… along the last axis, below ``bound`` (a table's length) when there is one."""
    if not shape:
        return np.zeros((), dtype=dtype)
    count = np.arange(shape[-1], dtype=np.int64)
    if bound:
        count = count % bound
    return np.array(np.broadcast_to(count, shape), dtype=dtype)


DESCRIBED_INPUTS = 4
"""Inputs :func:`describe_random` names; the rest are counted."""


def describe_random(model: Model | onnx.ModelProto, sample: dict[str, np.ndarray]) -> str:
    """What :func:`make_inputs` drew for each input of ``sample``, for reports: ``x 1×3×64×64 normal,
    sr int64 0..9`` (a random integer input the model reads as a rate or a length says why the samples do not
    look like the user's data)."""
    proto = structure(model)
    bounds = index_bounds(proto)
    roles = input_roles(proto)
    parts = []
    for name, value in list(sample.items())[:DESCRIBED_INPUTS]:
        shape = "×".join(str(d) for d in value.shape) if value.ndim else "scalar"
        kind = value.dtype.kind
        drawn = roles.describe(name) or (f"{value.dtype.name} 0..{bounds.get(name, INT_HIGH) - 1}" if kind in "iu" else
                                         "booleans" if kind == "b" else "strings" if kind == "O" else "normal")
        parts.append(f"{name} {shape} {drawn}")
    more = len(sample) - DESCRIBED_INPUTS
    return ", ".join(parts) + (f" and {more} more input{'s' if more != 1 else ''}" if more > 0 else "")


def _random_array(rng: np.random.Generator, elem_type: int, shape: tuple[int, ...], name: str,
                  int_high: int = INT_HIGH) -> np.ndarray:
    """An array even for scalar shapes: numpy's generators return bare scalars there, which onnxruntime refuses."""
    return np.asarray(_random_values(rng, elem_type, shape, name, int_high))


def _random_values(rng: np.random.Generator, elem_type: int, shape: tuple[int, ...], name: str,
                   int_high: int) -> ArrayLike:
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, int_high, size=shape).astype(dtype)
    if dtype.kind == "O":
        return rng.integers(0, 10, size=shape).astype(str).astype(object)
    if dtype.kind in "fcV":
        return rng.standard_normal(shape).astype(dtype)
    raise GraphLensError(f"input '{name}' has type {dtype_name(elem_type)}, which random inputs do not cover")


def parse_dims(items: list[str]) -> dict[str, int]:
    """``['N=2', 'seq=128']`` -> ``{'N': 2, 'seq': 128}``, as given on the command line with ``--dim``."""
    dims: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise GraphLensError(f"--dim '{item}': expected NAME=VALUE")
        try:
            size = int(value)
        except ValueError:
            raise GraphLensError(f"--dim '{item}': expected NAME=VALUE with a whole number as VALUE") from None
        if size < 1:
            raise GraphLensError(f"--dim '{item}': the value must be 1 or more")
        if name in dims:
            raise GraphLensError(f"--dim '{item}': '{name}' is given more than once")
        dims[name] = size
    return dims


def load_inputs(path: Path, model: Model | onnx.ModelProto) -> dict[str, np.ndarray]:
    """Arrays from an ``.npz`` file, checked against the model's inputs and cast where no value changes meaning."""
    path = Path(path)
    arrays = read_npz(path)
    inputs = graph_inputs(model)
    names = [v.name for v in inputs]
    overridable = {v.name for v in structure(model).graph.input} - set(names)
    for key in arrays:
        if key not in names and key not in overridable:
            raise GraphLensError(
                f"{path}: has an array for unknown input '{key}'; the model's inputs are: {', '.join(names) or 'none'}"
            )
    for name in names:
        if name not in arrays:
            raise GraphLensError(f"{path}: has no array for input '{name}'")
    by_name = {v.name: v for v in structure(model).graph.input}
    return {key: _conform(path, by_name[key], array) for key, array in arrays.items()}


def read_npz(path: Path, what: str = "inputs") -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file (``what`` it holds: ``inputs``, ``calibration samples``); anything else (a
    ``.npy``, an image, text, a damaged archive) in one line naming the file."""
    if not path.exists():
        raise GraphLensError(f"{path}: no such file")
    not_npz = f"{path}: not an .npz of one array per input (numpy.savez(path, INPUT_NAME=array))"
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise GraphLensError(f"{not_npz}; it holds a single array")
        with data:
            return {key: np.asarray(data[key]) for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        if isinstance(exc, ValueError) and "pickle" in str(exc):  # numpy's guess for a file of no numpy format,
            raise GraphLensError(not_npz) from None  # which would point at loading it unsafely
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GraphLensError(f"{path}: cannot read {what} ({detail})") from exc


def _category(dtype: np.dtype) -> str:
    if dtype.kind == "b":
        return "bool"
    if dtype.kind in "iu":
        return "int"
    if dtype.kind == "f" or dtype.name.startswith(("bfloat", "float")):
        return "float"
    if dtype.kind == "c":
        return "complex"
    return "text" if dtype.kind in "USO" else dtype.kind


# Source category -> target categories a cast keeps the meaning for (precision may drop).
_SAFE_ISH = {
    "bool": {"bool", "int", "float"},
    "int": {"int", "float", "complex"},
    "float": {"float", "complex"},
    "complex": {"complex"},
    "text": {"text"},
}


def _conform(path: Path, value: onnx.ValueInfoProto, array: np.ndarray) -> np.ndarray:
    """Cast to the declared dtype when that is only a precision change, and check the shape."""
    declared = type_of_value_info(value)
    if declared.shape is not None:
        _check_shape(path, value.name, declared.shape, array.shape)
    if value.type.WhichOneof("value") != "tensor_type" or not value.type.tensor_type.elem_type:
        return array
    target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
    if array.dtype == target:
        return array
    source, wanted = _category(array.dtype), _category(target)
    if wanted not in _SAFE_ISH.get(source, set()):
        raise GraphLensError(
            f"{path}: input '{value.name}' is {array.dtype.name} in the file but the model expects {target.name}"
        )
    cast = array.astype(target)
    if wanted == "int" and not np.array_equal(cast, array):
        raise GraphLensError(
            f"{path}: input '{value.name}' has values that do not fit {target.name} (the file holds {array.dtype.name})"
        )
    return cast


def _check_shape(path: Path, name: str, declared: tuple[Dim, ...], actual: tuple[int, ...]) -> None:
    fixed_ok = all(is_unnamed(d) or not isinstance(d, int) or d == a for d, a in zip(declared, actual))
    if len(declared) == len(actual) and fixed_ok:
        return
    want = "[" + ", ".join("?" if is_unnamed(d) else str(d) for d in declared) + "]"
    got = "[" + ", ".join(str(a) for a in actual) + "]"
    raise GraphLensError(f"{path}: input '{name}' has shape {got} in the file but the model expects {want}")


def float_outputs(model: onnx.ModelProto) -> list[str]:
    """The graph outputs of a floating-point type: those an error in dB or a cosine can be measured on."""
    return [v.name for v in model.graph.output if v.type.tensor_type.elem_type in (
        onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)]
