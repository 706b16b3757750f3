"""A folder of images as calibration samples, turned into the model's input by a stated preprocessing.

``graphlens quantize MODEL --calibration DIR --preprocess "size=640x640,mean=0.485/0.456/0.406,
std=0.229/0.224/0.225,scale=1/255,layout=NCHW,order=rgb"`` reads every image of ``DIR`` (in name
order; files whose extension Pillow does not know are passed over) as one sample of batch 1 of the
model's only input. The preprocessing is comma-separated ``key=value`` pairs, every one optional:

- ``size=WIDTHxHEIGHT`` (as image tools write it: ``320x48`` is 320 wide, 48 high); default the
  input's own height and width, which must then be fixed;
- ``resize=stretch`` (default: to the size exactly) or ``resize=fit`` (keep the aspect ratio, fit
  inside the size, the rest, right and bottom, left at 0 in the model's units, as PaddleOCR pads);
- ``scale=S`` (a number or a fraction, ``1/255``), ``mean=M``, ``std=D``: the input value is
  ``(pixel · S − M_c) / D_c`` per channel ``c``; ``M`` and ``D`` are one number or one per channel
  separated by ``/`` (in the order the model gets the channels). Defaults: ``scale=1/255`` for a
  float input (1 for an integer one), ``mean=0``, ``std=1``;
- ``layout=NCHW`` or ``NHWC`` (``CHW``/``HWC`` for an input without a batch axis); default: the
  channels where the input's shape has 3 (or 1) of them, else NCHW;
- ``order=rgb`` (default) or ``bgr`` (OpenCV's order, which many detectors were trained with).

An input with one channel gets grayscale images, one with three RGB (or BGR). Pillow is imported
only here, when a folder is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.types import type_of_value_info
from graphlens.numerics.inputs import graph_inputs

if TYPE_CHECKING:
    from graphlens.numerics.samples import CalibrationData

MAX_SIDE = 16384
"""Largest width or height ``size=`` takes (a 16384² RGB float sample is 3 GiB)."""

KEYS = ("size", "resize", "scale", "mean", "std", "layout", "order")
LAYOUTS = ("NCHW", "NHWC", "CHW", "HWC")


@dataclass(frozen=True)
class Preprocess:
    """How an image becomes the model's input (see the module docstring); ``None``: from the input."""

    size: tuple[int, int] | None = None
    """(width, height)."""
    resize: str = "stretch"
    scale: float | None = None
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    layout: str | None = None
    order: str = "rgb"
    text: str = field(default="", compare=False)


def _number(text: str, key: str) -> float:
    try:
        if "/" in text and key == "scale":
            top, _, bottom = text.partition("/")
            value = float(top) / float(bottom)
        else:
            value = float(text)
    except ZeroDivisionError:
        raise GraphLensError(f"preprocessing: {key}={text} divides by zero") from None
    except ValueError:
        raise GraphLensError(f"preprocessing: {key}={text} is not a number") from None
    if not math.isfinite(value):
        raise GraphLensError(f"preprocessing: {key}={text} is not a finite number")
    return value


def parse_preprocess(text: str | None) -> Preprocess:
    """``key=value,...`` as a :class:`Preprocess`; an unknown key or a bad value raises in one line."""
    values: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or key not in KEYS:
            raise GraphLensError(f"preprocessing: '{item.strip()}' is not one of {', '.join(k + '=…' for k in KEYS)}")
        if key in values:
            raise GraphLensError(f"preprocessing: {key} given twice")
        values[key] = value
    size = None
    if "size" in values:
        w, x, h = values["size"].lower().partition("x")
        if not x or not w.strip().isdecimal() or not h.strip().isdecimal() or int(w) < 1 or int(h) < 1:
            raise GraphLensError(f"preprocessing: size={values['size']} is not WIDTHxHEIGHT (640x640)")
        if max(int(w), int(h)) > MAX_SIDE:
            raise GraphLensError(f"preprocessing: size={values['size']}: at most {MAX_SIDE} pixels a side")
        size = (int(w), int(h))
    choices = {"resize": ("stretch", "fit"), "order": ("rgb", "bgr"), "layout": LAYOUTS}
    for key, allowed in choices.items():
        if key in values and values[key].lower() not in {a.lower() for a in allowed}:
            raise GraphLensError(f"preprocessing: {key}={values[key]}; {key} is one of {', '.join(allowed)}")
    per_channel = {k: tuple(_number(v, k) for v in values[k].split("/")) for k in ("mean", "std") if k in values}
    if any(d == 0 for d in per_channel.get("std", ())):
        raise GraphLensError("preprocessing: std must not be 0")
    scale = _number(values["scale"], "scale") if "scale" in values else None
    if scale == 0:
        raise GraphLensError("preprocessing: scale must not be 0 (every sample would be the mean)")
    return Preprocess(
        size=size, resize=values.get("resize", "stretch").lower(), scale=scale,
        mean=per_channel.get("mean", (0.0,)), std=per_channel.get("std", (1.0,)),
        layout=values["layout"].upper() if "layout" in values else None,
        order=values.get("order", "rgb").lower(), text=text or "")


@dataclass(frozen=True)
class _Target:
    """What the model's input wants: its layout, channels, height and width, and element type."""

    name: str
    layout: str
    channels: int
    size: tuple[int, int]
    dtype: np.dtype
    batched: bool


def _static(dim: object) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def _target(model: Model | onnx.ModelProto, prep: Preprocess, folder: Path) -> _Target:
    inputs = graph_inputs(model)
    if len(inputs) != 1:
        names = ", ".join(f"'{v.name}'" for v in inputs)
        raise GraphLensError(f"{folder}: images feed a model with one input; this one has {len(inputs)} ({names}): "
                             "give an .npz with one array per input")
    value = inputs[0]
    shape = type_of_value_info(value).shape
    if shape is None or len(shape) not in (3, 4):
        raise GraphLensError(f"{folder}: images need an input of rank 4 (NCHW/NHWC) or 3; input '{value.name}' is "
                             f"{'of unknown rank' if shape is None else list(shape)}")
    batched = len(shape) == 4
    layout = prep.layout or ("NHWC" if shape[-1] in (1, 3) and shape[-3] not in (1, 3) else "NCHW")
    layout = layout if batched else layout.removeprefix("N")
    if len(layout) != len(shape):
        raise GraphLensError(f"preprocessing: layout={prep.layout} does not fit input '{value.name}' {list(shape)}")
    dims = dict(zip(layout, shape))
    if batched and _static(dims["N"]) not in (None, 1):
        raise GraphLensError(f"{folder}: input '{value.name}' takes a fixed batch of {dims['N']}; images feed batch 1")
    hint = _layout_hint(prep.layout, layout, shape)
    channels = _static(dims["C"]) or 3
    if channels not in (1, 3):
        raise GraphLensError(f"{folder}: input '{value.name}' has {channels} channels; images give 1 or 3{hint}")
    height, width = _static(dims["H"]), _static(dims["W"])
    if prep.size is None:
        if height is None or width is None:
            raise GraphLensError(f"{folder}: input '{value.name}' {list(shape)} has no fixed height and width: "
                                 "set size=WIDTHxHEIGHT in the preprocessing")
        size = (width, height)
    else:
        size = prep.size
        if (height is not None and height != size[1]) or (width is not None and width != size[0]):
            raise GraphLensError(f"preprocessing: size={size[0]}x{size[1]} but input '{value.name}' {list(shape)} is "
                                 f"{width or '?'} wide and {height or '?'} high as {layout}{hint}")
    for key in ("mean", "std"):
        if len(getattr(prep, key)) not in (1, channels):
            raise GraphLensError(f"preprocessing: {key} has {len(getattr(prep, key))} values; the input has "
                                 f"{channels} channels")
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
    return _Target(value.name, layout, channels, size, dtype, batched)


_OTHER_LAYOUT = {"NCHW": "NHWC", "NHWC": "NCHW", "CHW": "HWC", "HWC": "CHW"}


def _layout_hint(given: str | None, layout: str, shape: tuple[object, ...]) -> str:
    """When the user's layout puts the channels on a dim that is not 1 or 3 and the other layout finds them there,
    a hint to use that one (``layout=NHWC`` on ``[?, 3, ?, ?]``)."""
    if given is None:
        return ""
    other = _OTHER_LAYOUT[layout]
    if _static(shape[layout.index("C")]) not in (1, 3) and _static(shape[other.index("C")]) in (1, 3):
        return f"; its channels look like axis {other.index('C')} ({shape[other.index('C')]}): layout={other}?"
    return ""


def image_files(folder: Path) -> list[Path]:
    """The files of ``folder`` (not its subfolders) whose extension Pillow reads, in name order."""
    from PIL import Image

    known = set(Image.registered_extensions())
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                  and p.suffix.lower() in known)


WIDE_MODES = {"I;16": "16-bit", "I;16B": "16-bit", "I;16L": "16-bit", "I;16N": "16-bit", "I": "32-bit integer",
              "F": "32-bit float"}
"""Pillow's modes with more than 8 bits a channel: converting them to L or RGB clips at 255."""


def _pixels(path: Path, target: _Target, prep: Preprocess) -> np.ndarray:
    """One image as an ``(H, W, C)`` float array of the preprocessed values."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            if image.mode in WIDE_MODES:
                raise GraphLensError(f"{path}: a {WIDE_MODES[image.mode]} image (mode {image.mode}); images are read "
                                     "as 8 bits a channel: convert it, or give the samples in an .npz")
            if image.mode == "P" and "transparency" in image.info:
                image = image.convert("RGBA")  # straight to RGB, Pillow warns on stderr; the colours are the same
            image = image.convert("L" if target.channels == 1 else "RGB")
    except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise GraphLensError(f"{path}: cannot read the image ({exc})") from None
    width, height = target.size
    if prep.resize == "fit":
        ratio = min(width / image.width, height / image.height)
        inner = (max(1, min(width, round(image.width * ratio))), max(1, min(height, round(image.height * ratio))))
        image = image.resize(inner, Image.Resampling.BILINEAR)
    else:
        image = image.resize((width, height), Image.Resampling.BILINEAR)
    pixels = np.asarray(image, np.float64).reshape(image.height, image.width, target.channels)
    if prep.order == "bgr":
        pixels = pixels[..., ::-1]
    scale = prep.scale if prep.scale is not None else (1.0 if target.dtype.kind in "iu" else 1.0 / 255.0)
    values = (pixels * scale - np.asarray(prep.mean)) / np.asarray(prep.std)
    out = np.zeros((height, width, target.channels), np.float64)  # "fit" pads with 0 right and bottom
    out[:values.shape[0], :values.shape[1]] = values
    return out


def load_image_folder(folder: str | Path, model: Model | onnx.ModelProto,
                      preprocess: str | Preprocess | None = None) -> CalibrationData:
    """Every image of ``folder``, preprocessed, as samples of batch 1 of the model's only input."""
    from graphlens.numerics.samples import CalibrationData, checked_values

    folder = Path(folder)
    prep = preprocess if isinstance(preprocess, Preprocess) else parse_preprocess(preprocess)
    try:
        import PIL  # noqa: F401  (a clear message before any work)
    except ImportError:
        raise GraphLensError("reading calibration images needs Pillow: pip install pillow") from None
    target = _target(model, prep, folder)
    files = image_files(folder)
    if not files:
        raise GraphLensError(f"{folder}: no images in the folder (png, jpg and the other formats Pillow reads)")
    layout = target.layout.removeprefix("N")
    samples = []
    for path in files:
        hwc = _pixels(path, target, prep)
        sample = hwc.transpose(2, 0, 1) if layout == "CHW" else hwc
        if target.dtype.kind in "iu":
            sample = np.rint(sample)
        sample = checked_values(sample[None], target.dtype, f"{path} preprocessed")[0]
        samples.append(sample[None] if target.batched else sample)
    text = f", preprocess {prep.text}" if prep.text else ""
    images = f"{len(files)} image{'' if len(files) == 1 else 's'}"
    return CalibrationData({target.name: np.stack(samples)}, f"from {images} in {folder}{text}")
