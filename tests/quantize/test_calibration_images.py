"""A folder of images as calibration samples: the preprocessing, its layouts, and its one-line errors."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from graphlens.core.errors import GraphLensError
from graphlens.numerics.image_samples import load_image_folder, parse_preprocess
from graphlens.quantize import load_calibration
from tests import models


def image_model(shape: list, *, channels_last: bool = False, inputs: int = 1) -> onnx.ModelProto:
    """One Conv (3 -> 4 channels, or 1 -> 4) on an image input; NHWC inputs are transposed first."""
    c = shape[-1] if channels_last else shape[1]
    rng = np.random.default_rng(0)
    inits = [models.init("w", rng.normal(0, 0.5, [4, c, 3, 3]).astype(np.float32))]
    nodes = []
    x = "x"
    if channels_last:
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], name="to_nchw", perm=[0, 3, 1, 2]))
        x = "xt"
    nodes.append(helper.make_node("Conv", [x, "w"], ["y"], name="conv", pads=[1, 1, 1, 1]))
    ins = [models.tensor("x", TensorProto.FLOAT, shape)]
    if inputs == 2:
        ins.append(models.tensor("mask", TensorProto.FLOAT, [1]))
        nodes.append(helper.make_node("Mul", ["y", "mask"], ["z"], name="mask"))
    out = "z" if inputs == 2 else "y"
    y_shape = [shape[0], 4, *(shape[1:3] if channels_last else shape[2:])]
    return models.make_model(nodes, ins, [models.tensor(out, TensorProto.FLOAT, y_shape)], inits)


def write_images(folder, count: int = 3, size: tuple[int, int] = (8, 6), mode: str = "RGB") -> list[np.ndarray]:
    """``count`` random images of ``size`` (width, height); their pixels as (H, W, C) arrays."""
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(1)
    pixels = []
    for i in range(count):
        array = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(array).convert(mode).save(folder / f"img{i}.png")
        pixels.append(np.asarray(Image.open(folder / f"img{i}.png").convert(mode), np.float64))
    return pixels


def test_images_become_samples_by_the_stated_preprocessing(tmp_path):
    pixels = write_images(tmp_path / "imgs")
    (tmp_path / "imgs" / "notes.txt").write_text("not an image; passed over")
    model = image_model(["batch", 3, "h", "w"])
    spec = "size=8x6,mean=0.485/0.456/0.406,std=0.229/0.224/0.225,scale=1/255,layout=NCHW"
    data = load_calibration(tmp_path / "imgs", model, preprocess=spec)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    expected = np.stack([((p / 255.0 - mean) / std).transpose(2, 0, 1)[None] for p in pixels]).astype(np.float32)
    assert data.samples == 3 and data.arrays["x"].shape == (3, 1, 3, 6, 8)
    np.testing.assert_allclose(data.arrays["x"], expected, rtol=1e-6)
    assert "3 images" in data.source
    bgr = load_calibration(tmp_path / "imgs", model, preprocess="size=8x6,order=bgr")
    np.testing.assert_allclose(bgr.arrays["x"][:, :, ::-1], (np.stack(pixels) / 255.0).transpose(0, 3, 1, 2)[:, None],
                               rtol=1e-6)


def test_size_comes_from_a_static_input_and_the_layout_from_its_shape(tmp_path):
    pixels = write_images(tmp_path / "imgs", size=(5, 4))
    nhwc = load_image_folder(tmp_path / "imgs", image_model([1, 4, 5, 3], channels_last=True), "scale=1")
    assert nhwc.arrays["x"].shape == (3, 1, 4, 5, 3)
    np.testing.assert_allclose(nhwc.arrays["x"][:, 0], np.stack(pixels))
    gray = load_image_folder(tmp_path / "imgs", image_model([1, 1, 4, 5]), "scale=1")
    expected = [np.asarray(Image.open(tmp_path / "imgs" / f"img{i}.png").convert("L"), np.float64) for i in range(3)]
    np.testing.assert_allclose(gray.arrays["x"][:, 0, 0], np.stack(expected))
    with pytest.raises(GraphLensError, match="no fixed height and width: set size=WIDTHxHEIGHT in the preprocessing"):
        load_image_folder(tmp_path / "imgs", image_model(["n", 3, "h", "w"]))
    with pytest.raises(GraphLensError, match="size=6x4 but input 'x'"):
        load_image_folder(tmp_path / "imgs", image_model([1, 3, 4, 5]), "size=6x4")
    with pytest.raises(GraphLensError, match=r"is \? wide and 3 high as NHWC; its channels look like axis 1 \(3\): "
                                             r"layout=NCHW\?"):  # the layout named wrong, as the line says
        load_image_folder(tmp_path / "imgs", image_model(["n", 3, "h", "w"]), "size=5x4,layout=NHWC")


def test_fit_keeps_the_aspect_ratio_and_pads_with_zero(tmp_path):
    folder = tmp_path / "wide"
    folder.mkdir()
    Image.new("RGB", (20, 5), (255, 255, 255)).save(folder / "line.png")  # 4:1, into a 16x8 input
    data = load_image_folder(folder, image_model([1, 3, 8, 16]), "resize=fit,mean=0.5,std=0.5")
    x = data.arrays["x"][0, 0]
    np.testing.assert_allclose(x[:, :4, :], 1.0)  # white: (1 - 0.5) / 0.5, scaled to 16x4
    np.testing.assert_allclose(x[:, 4:, :], 0.0)  # below it, the padding


def test_bad_folders_and_models_are_refused_in_one_line(tmp_path):
    model = image_model([1, 3, 6, 8])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GraphLensError, match="empty: no images in the folder"):
        load_calibration(empty, model)
    write_images(tmp_path / "imgs")
    (tmp_path / "imgs" / "broken.jpg").write_bytes(b"not a jpeg at all")
    with pytest.raises(GraphLensError, match=r"broken\.jpg: cannot read the image"):
        load_calibration(tmp_path / "imgs", model)
    (tmp_path / "imgs" / "broken.jpg").unlink()
    with pytest.raises(GraphLensError, match=r"this one has 2 \('x', 'mask'\)"):
        load_calibration(tmp_path / "imgs", image_model([1, 3, 6, 8], inputs=2))
    with pytest.raises(GraphLensError, match="'colour=red' is not one of size="):
        load_calibration(tmp_path / "imgs", model, preprocess="colour=red")
    with pytest.raises(GraphLensError, match="mean has 2 values; the input has 3 channels"):
        load_calibration(tmp_path / "imgs", model, preprocess="mean=0.5/0.5")
    with pytest.raises(GraphLensError, match="a preprocessing is for a folder of images"):
        np.savez(tmp_path / "s.npz", x=np.zeros((1, 3, 6, 8), np.float32))
        load_calibration(tmp_path / "s.npz", model, preprocess="scale=1")


def test_preprocess_syntax():
    p = parse_preprocess("size=640x480, mean=0.5, std=0.25/0.5/1, scale=1/255, layout=nhwc, order=BGR, resize=fit")
    assert p.size == (640, 480) and p.mean == (0.5,) and p.std == (0.25, 0.5, 1.0)
    assert p.scale == pytest.approx(1 / 255) and (p.layout, p.order, p.resize) == ("NHWC", "bgr", "fit")
    for bad, message in [("size=640", "not WIDTHxHEIGHT"), ("scale=a/b", "not a number"), ("std=0", "must not be 0"),
                         ("layout=NCWH", "layout is one of"), ("size=1x1,size=2x2", "given twice"),
                         ("size=²x48", "not WIDTHxHEIGHT"), ("size=99999999x48", "at most 16384 pixels a side"),
                         ("std=nan", "not a finite number"), ("mean=inf", "not a finite number"),
                         ("scale=1/0", "divides by zero"), ("scale=0", "scale must not be 0")]:
        with pytest.raises(GraphLensError, match=message):
            parse_preprocess(bad)


def test_quantize_from_an_image_folder_on_the_command_line_and_in_the_workspace(tmp_path, capsys):
    from graphlens.cli import main
    from graphlens.workspace import Workspace

    write_images(tmp_path / "imgs", count=4, size=(12, 10))
    path = tmp_path / "m.onnx"
    onnx.save(image_model(["n", 3, "h", "w"]), path)
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    code = main(["quantize", str(path), "-o", str(out), "--calibration", str(tmp_path / "imgs"),
                 "--preprocess", "size=12x10,mean=0.5,std=0.5", "--method", "auto", "--report", str(report)])
    assert code == 0
    data = json.loads(report.read_text())
    assert data["calibration"]["samples"] == 4 and "4 images" in data["calibration"]["source"]
    printed = capsys.readouterr().out
    assert data["range_methods"] and "auto ranges:" in printed and "note: no calibration data" not in printed
    assert main(["quantize", str(path), "-o", str(tmp_path / "q2.onnx"), "--calibration", str(tmp_path / "imgs")]) == 2
    assert "set size=WIDTHxHEIGHT in the preprocessing" in capsys.readouterr().err
    ws = Workspace(keep_history=False)
    ws.open(path)
    result = ws.quantization.quantize(calibration=tmp_path / "imgs", preprocess="size=12x10")
    assert result.samples == 4


def test_images_whose_values_would_be_lost_are_refused_in_one_line(tmp_path):
    """16-bit and float images would clip at 255; a preprocessing that overflows gives infinite samples; an integer
    input would clip what the preprocessing makes of the pixels to all 0 or all 255."""
    model = image_model([1, 3, 6, 8])
    wide = tmp_path / "wide"
    wide.mkdir()
    Image.fromarray(np.full((6, 8), 40000, np.uint16)).save(wide / "deep.png")
    with pytest.raises(GraphLensError, match=r"deep\.png: a 16-bit image \(mode I;16\); images are read as 8 bits"):
        load_calibration(wide, image_model([1, 1, 6, 8]))
    write_images(tmp_path / "imgs")
    with pytest.raises(GraphLensError, match="NaN or infinite values as float32"):
        load_calibration(tmp_path / "imgs", model, preprocess="std=1e-300")
    as_bytes = image_model([1, 3, 6, 8])
    as_bytes.graph.input[0].type.tensor_type.elem_type = TensorProto.UINT8
    assert load_calibration(tmp_path / "imgs", as_bytes).arrays["x"].dtype == np.uint8
    with pytest.raises(GraphLensError, match=r"preprocessed has values from -1\.0 to .*is uint8 \(0\.\.255\)"):
        load_calibration(tmp_path / "imgs", as_bytes, preprocess="scale=1/255,mean=0.5,std=0.5")


def test_a_palette_image_with_transparency_reads_without_a_warning(tmp_path):
    """Pillow warns on stderr when such an image goes to RGB directly; its pixels are the same through RGBA."""
    import warnings

    folder = tmp_path / "imgs"
    folder.mkdir()
    image = Image.new("P", (8, 6))
    image.putpalette([v for i in range(256) for v in (i, 255 - i, (7 * i) % 256)])
    image.putdata([(3 * i) % 256 for i in range(48)])
    image.save(folder / "palette.png", transparency=b"\x00" * 16)  # transparency as bytes, as GIF-born PNGs have
    with Image.open(folder / "palette.png") as reopened:
        assert reopened.mode == "P" and isinstance(reopened.info.get("transparency"), bytes)
        expected = np.asarray(reopened.convert("RGBA").convert("RGB"), np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = load_calibration(folder, image_model(["batch", 3, "h", "w"]), preprocess="size=8x6,layout=NCHW")
    np.testing.assert_allclose(data.arrays["x"][0, 0], (expected / 255.0).transpose(2, 0, 1), rtol=1e-6)
