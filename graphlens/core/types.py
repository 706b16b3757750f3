"""Tensor element types and shapes as people read them (``float32 [1, 3, 224, 224]``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import onnx

# ONNX element type -> the name numpy and most users know it by.
_DTYPE_NAMES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.STRING: "string",
    onnx.TensorProto.BOOL: "bool",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.UINT32: "uint32",
    onnx.TensorProto.UINT64: "uint64",
    onnx.TensorProto.COMPLEX64: "complex64",
    onnx.TensorProto.COMPLEX128: "complex128",
    onnx.TensorProto.BFLOAT16: "bfloat16",
}

Dim = int | str | None
"""A dimension: a size, a symbolic name, or None when unknown."""


def dtype_name(elem_type: int) -> str:
    """Readable name of an ONNX element type; unknown codes keep ONNX's own name."""
    if elem_type in _DTYPE_NAMES:
        return _DTYPE_NAMES[elem_type]
    try:
        name: str = onnx.TensorProto.DataType.Name(elem_type)
        return name.lower()
    except ValueError:
        return f"dtype{elem_type}"


@dataclass(frozen=True)
class TensorType:
    """Element type and shape of a tensor; either may be unknown."""

    dtype: str | None = None
    shape: tuple[Dim, ...] | None = None

    def __str__(self) -> str:
        dtype = self.dtype or "?"
        if self.shape is None:
            return dtype
        return f"{dtype} [{', '.join('?' if d is None else str(d) for d in self.shape)}]"

    def to_json(self) -> dict[str, object]:
        return {"dtype": self.dtype, "shape": None if self.shape is None else list(self.shape)}


def type_of_value_info(value_info: onnx.ValueInfoProto) -> TensorType:
    """Type of a graph input/output/value_info entry; sequences and maps give an empty type."""
    t = value_info.type
    if t.WhichOneof("value") != "tensor_type":
        return TensorType()
    tensor_type = t.tensor_type
    dtype = dtype_name(tensor_type.elem_type) if tensor_type.elem_type else None
    if not tensor_type.HasField("shape"):
        return TensorType(dtype, None)
    dims: list[Dim] = []
    for d in tensor_type.shape.dim:
        kind = d.WhichOneof("value")
        dims.append(d.dim_value if kind == "dim_value" else d.dim_param if kind == "dim_param" else None)
    return TensorType(dtype, tuple(dims))


def type_of_initializer(tensor: onnx.TensorProto) -> TensorType:
    return TensorType(dtype_name(tensor.data_type), tuple(int(d) for d in tensor.dims))


def tensor_nbytes(tensor: onnx.TensorProto) -> int:
    """Bytes the tensor's data occupies, without decoding, reading or copying it.

    From the dims where the type has a fixed size (reading ``raw_data`` in Python copies it: a
    second gigabyte for a decoder's weights), else the stated external length, else the raw bytes.
    """
    for entry in tensor.external_data:
        if entry.key == "length":
            return int(entry.value)
    size = dims_nbytes(tensor.dims, tensor.data_type)
    if size is not None and size >= 0:
        return size
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    return 0


_ITEM_BITS: dict[int, int] = {
    onnx.TensorProto.FLOAT: 32, onnx.TensorProto.FLOAT16: 16, onnx.TensorProto.BFLOAT16: 16,
    onnx.TensorProto.DOUBLE: 64, onnx.TensorProto.INT8: 8, onnx.TensorProto.UINT8: 8,
    onnx.TensorProto.INT16: 16, onnx.TensorProto.UINT16: 16, onnx.TensorProto.INT32: 32,
    onnx.TensorProto.UINT32: 32, onnx.TensorProto.INT64: 64, onnx.TensorProto.UINT64: 64,
    onnx.TensorProto.BOOL: 8, onnx.TensorProto.COMPLEX64: 64, onnx.TensorProto.COMPLEX128: 128,
}
for _name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0"):
    if hasattr(onnx.TensorProto, _name):
        _ITEM_BITS[getattr(onnx.TensorProto, _name)] = 8
for _name in ("INT4", "UINT4", "FLOAT4E2M1"):
    if hasattr(onnx.TensorProto, _name):
        _ITEM_BITS[getattr(onnx.TensorProto, _name)] = 4


def dims_nbytes(dims: Iterable[int], data_type: int) -> int | None:
    """Bytes a tensor of these dims takes in raw form (4-bit types packed two to a byte); None for strings."""
    bits = _ITEM_BITS.get(data_type)
    if bits is None:
        return None
    count = 1
    for d in dims:
        count *= int(d)
    return (count * bits + 7) // 8
