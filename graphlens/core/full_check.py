"""The ONNX checker's full check, the one every written model passes: structure, then shape inference.

``onnx.checker.check_model(model, full_check=True)`` judges each node by its operator's schema and then
runs shape inference in strict mode, so a dim of -1, strides of 0, a BatchNormalization whose scale has
7 values for 16 channels or a weight relabelled float16 are refused where the plain check lets them by.

onnx knows no schema for onnxruntime's contrib operators: it skips nodes of the ``com.microsoft``
domain and refuses those onnxruntime registers in the default domain (``SimplifiedLayerNormalization``).
Both are judged here by onnxruntime's own schemas (``get_all_operator_schema()``): they are
registered with onnx for the length of one check and removed after it, so the rest of the process
sees onnx's registry as it was. Other custom domains are skipped, as the checker does by default.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import onnx
import onnx.defs

_LOCK = threading.Lock()

_NOISE = re.compile(r"\[ShapeInferenceError\]\s*(Inference error\(s\):\s*)?")
_NODE = re.compile(r"^\(op_type:(?P<op>[^,]*), node name: (?P<name>.*?)\):\s*")


NOT_UTF8 = "a name or string in the model is not UTF-8 text, which ONNX requires"


def full_check_problem(model: bytes | str | os.PathLike[str]) -> str | None:
    """The checker's first complaint about ``model`` (its bytes, or a file's path when it has external data or is
    over 2 GiB) in one line; None when it passes."""
    with _contrib_schemas():
        try:
            onnx.checker.check_model(model, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
            return first_line(exc)
        except UnicodeDecodeError:
            return NOT_UTF8
    return None


def plain_check_problem(model: bytes | str | os.PathLike[str]) -> str | None:
    """The checker's first complaint without shape inference (what ``--force`` still requires); None when none."""
    with _contrib_schemas():
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as exc:
            return first_line(exc)
        except UnicodeDecodeError:
            return NOT_UTF8
    return None


def first_line(exc: BaseException) -> str:
    """An onnx error's first line, without the repeated ``[ShapeInferenceError] Inference error(s):`` prefixes."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    line = _NOISE.sub("", line).strip() or line
    line = _NODE.sub(lambda m: f"{m['op']} '{m['name']}': ", line)
    return line[:-1] if line.endswith(".") else line


@contextmanager
def _contrib_schemas() -> Iterator[None]:
    """onnxruntime's contrib schemas known to onnx while the block runs (one check at a time)."""
    with _LOCK:
        added = []
        try:
            for schema in _onnxruntime_schemas():
                if not _known(schema):
                    onnx.defs.register_schema(schema)
                    added.append(schema)
            yield
        finally:
            for schema in added:
                onnx.defs.deregister_schema(schema.name, schema.since_version, schema.domain)


def _known(schema: onnx.defs.OpSchema) -> bool:
    try:
        found = onnx.defs.get_schema(schema.name, schema.since_version, schema.domain)
    except onnx.defs.SchemaError:
        return False
    return bool(found.since_version == schema.since_version)


@cache
def _onnxruntime_schemas() -> tuple[onnx.defs.OpSchema, ...]:
    """onnxruntime's schemas that onnx lacks: the ``com.microsoft`` domain, and default-domain operators onnx has
    never defined; empty when onnxruntime is not installed or does not list its schemas."""
    try:
        from onnxruntime.capi import _pybind_state
    except ImportError:
        return ()
    listing = getattr(_pybind_state, "get_all_operator_schema", None)
    if listing is None:
        return ()
    converted = []
    for schema in listing():
        domain = schema.domain or ""
        if domain == "com.microsoft" or (domain in ("", "ai.onnx") and not onnx.defs.has(schema.name, "")):
            converted.append(_as_onnx_schema(schema, "" if domain == "ai.onnx" else domain))
    return tuple(converted)


def _as_onnx_schema(schema: Any, domain: str) -> onnx.defs.OpSchema:
    """onnxruntime's schema as onnx's: inputs, outputs, type constraints and attributes (whose defaults the
    checker does not need)."""
    option = onnx.defs.OpSchema.FormalParameterOption
    attr_type = onnx.defs.OpSchema.AttrType

    def parameter(p: Any) -> onnx.defs.OpSchema.FormalParameter:
        return onnx.defs.OpSchema.FormalParameter(p.name, p.typeStr, param_option=getattr(option, p.option.name),
                                                  is_homogeneous=bool(p.isHomogeneous))

    attributes = [onnx.defs.OpSchema.Attribute(a.name, getattr(attr_type, a.type.name), required=bool(a.required))
                  for a in schema.attributes.values()]
    return onnx.defs.OpSchema(
        schema.name, domain, int(schema.since_version),
        inputs=[parameter(p) for p in schema.inputs], outputs=[parameter(p) for p in schema.outputs],
        type_constraints=[(c.type_param_str, list(c.allowed_type_strs), "") for c in schema.type_constraints],
        attributes=attributes,
    )
