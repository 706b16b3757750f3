"""Weight-only blocks: int4/int8 MatMul and Gemm weights as blocked DequantizeLinear or MatMulNBits, checked
against numpy."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphlens.cli import main
from graphlens.core.task import Cancelled, Task
from graphlens.quantize import CalibrationData, QuantConfig
from graphlens.quantize.blocks import matmulnbits_arrays, quantize_blocks
from graphlens.quantize.qdq import QType
from graphlens.workspace import Workspace
from tests import models

K, HIDDEN, N = 72, 48, 10
"""72 rows is 2¼ blocks of 32, 48 is 1½: neither K divides into blocks."""


def decoder_like(tmp_path) -> tuple[str, np.ndarray, np.ndarray]:
    """x [2, 5, K] -> MatMul 'up' (an initializer) -> Relu -> MatMul 'down' (a Constant behind Transpose, as
    dynamo exports write a linear layer) -> y; the file, and both weights as the MatMuls read them."""
    rng = np.random.default_rng(7)
    w_up = rng.normal(0, 0.3, [K, HIDDEN]).astype(np.float32)
    w_up[:, 3] *= 20  # one column far larger: a per-tensor scale would drown the others
    w_down = rng.normal(0, 0.3, [HIDDEN, N]).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w_up"], ["h"], name="up"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("Constant", [], ["w_down_t"], name="const",
                              value=onnx.numpy_helper.from_array(np.ascontiguousarray(w_down.T), "v")),
             helper.make_node("Transpose", ["w_down_t"], ["w_down"], name="t", perm=[1, 0]),
             helper.make_node("MatMul", ["hr", "w_down"], ["y"], name="down")]
    model = models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, [2, 5, K])],
                              [models.tensor("y", TensorProto.FLOAT, [2, 5, N])], [models.init("w_up", w_up)], opset=17)
    path = tmp_path / "decoder.onnx"
    onnx.save(model, path)
    return str(path), w_up, w_down


def numpy_blocks(w: np.ndarray, bits: int, block: int, symmetric: bool) -> np.ndarray:
    """The dequantized weight, one block at a time: symmetric signed narrow (−7..7, −127..127) with
    s = max|w| / q_max, or unsigned 0..2^b−1 with s = (max − min) / (2^b − 1) over a range holding 0."""
    out = np.empty_like(w)
    for start in range(0, w.shape[0], block):
        for n in range(w.shape[1]):
            part = w[start:start + block, n]
            lo, hi = min(float(part.min()), 0.0), max(float(part.max()), 0.0)
            if symmetric:
                qmax = 2 ** (bits - 1) - 1
                s = np.float32(max(-lo, hi) / qmax)
                q = np.clip(np.rint(part / s), -qmax, qmax)
                out[start:start + block, n] = q * s
            else:
                qmax = 2**bits - 1
                s = np.float32((hi - lo) / qmax)
                z = np.clip(np.rint(-lo / s), 0, qmax)
                q = np.clip(np.rint(part / s) + z, 0, qmax)
                out[start:start + block, n] = (q - z) * s
    return out


def sqnr(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x.astype(np.float64), y.astype(np.float64)
    return 10 * np.log10(np.sum(x * x) / np.sum((x - y) ** 2))


def run(path, x: np.ndarray) -> np.ndarray:
    """The model in onnxruntime with its default optimizations, except that a DequantizeLinear → MatMul it fuses
    into MatMulNBits computes in float32 (its default there is accuracy level 4: int8 activations)."""
    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


CASES = [(fmt, bits, sym) for fmt in ("qdq", "matmulnbits") for bits in (4, 8) for sym in (True, False)]


@pytest.mark.parametrize(("fmt", "bits", "symmetric"), CASES)
def test_blocks_run_in_onnxruntime_as_numpy_computes_them(tmp_path, fmt, bits, symmetric):
    path, w_up, w_down = decoder_like(tmp_path)
    ws = Workspace()
    ws.open(path)
    config = QuantConfig(weight_only=True, weight_bits=bits, block_size=32, weight_format=fmt,
                         symmetric_weights=symmetric)
    x = np.random.default_rng(1).standard_normal((3, 2, 5, K)).astype(np.float32)
    result = ws.quantization.quantize(config, CalibrationData({"x": x}, "test samples"))
    out = tmp_path / "q.onnx"
    ws.save_as(out)
    saved = onnx.load(out)
    onnx.checker.check_model(saved, full_check=fmt == "qdq")  # the checker knows no com.microsoft schema
    assert [v.name for v in saved.graph.input] == ["x"] and [v.name for v in saved.graph.output] == ["y"]

    up, down = numpy_blocks(w_up, bits, 32, symmetric), numpy_blocks(w_down, bits, 32, symmetric)
    expected = np.maximum(x @ up, 0) @ down
    np.testing.assert_allclose(np.stack([run(out, s) for s in x]), expected, rtol=1e-4, atol=1e-4)

    rows = {row.node: row for row in result.layers}
    assert set(rows) == {"up", "down"} and result.counts == {"weight": 2}
    assert rows["up"].local_sqnr_db == pytest.approx(sqnr(w_up, up), abs=0.01)
    assert rows["down"].local_sqnr_db == pytest.approx(sqnr(w_down, down), abs=0.01)
    assert rows["down"].sqnr_db == result.output_sqnr_db == pytest.approx(
        sqnr(np.maximum(x @ w_up, 0) @ w_down, expected), abs=0.01)
    assert rows["up"].sqnr_db == pytest.approx(sqnr(x @ w_up, x @ up), abs=0.01)
    assert result.samples == 3
    assert set(result.outputs_sqnr_db) == {"y"}


def stored(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == op_type)


def test_asymmetric_blocks_carry_zero_points_and_symmetric_ones_do_not(tmp_path):
    path, *_ = decoder_like(tmp_path)
    ws = Workspace()
    ws.open(path)
    types = {}
    for fmt, op in (("qdq", "DequantizeLinear"), ("matmulnbits", "MatMulNBits")):
        for sym in (True, False):
            config = QuantConfig(weight_only=True, weight_bits=4, weight_format=fmt, symmetric_weights=sym)
            ws.quantization.quantize(config, samples=1)
            proto = ws.model.to_proto()
            node = stored(proto, op)
            inputs = 2 if op == "DequantizeLinear" else 3  # MatMulNBits: A, B, scales
            assert len(node.input) == inputs + (0 if sym else 1)
            inits = {t.name: t for t in proto.graph.initializer}
            weight = node.input[0] if op == "DequantizeLinear" else node.input[1]
            types[fmt, sym] = inits[weight].data_type
            ws.undo()
    assert types["qdq", True] == TensorProto.INT4 and types["qdq", False] == TensorProto.UINT4
    assert types["matmulnbits", True] == types["matmulnbits", False] == TensorProto.UINT8


def test_matmulnbits_layout_against_a_direct_packing():
    """B [N, nb, B/2] low nibble first with q + 8, padded rows at the zero point; zero points two blocks a byte."""
    w = np.random.default_rng(2).normal(size=(40, 3)).astype(np.float32)  # 40 rows: 2½ blocks of 16
    bq = quantize_blocks(w, QType(4, False), 16, symmetric=False)
    packed, scales, zeros = matmulnbits_arrays(bq, with_zero_point=True)
    assert packed.shape == (3, 3, 8) and scales.shape == (3, 3) and zeros is not None and zeros.shape == (3, 2)
    q = bq.values.astype(int)
    assert packed[1, 0, 0] == q[0, 1] | (q[1, 1] << 4)
    assert packed[2, 2, 3] == (q[38, 2] | (q[39, 2] << 4))
    assert packed[2, 2, 4] == bq.zero_point[2, 2] * 17  # rows 40, 41: padding at the zero point
    assert zeros[0, 0] == bq.zero_point[0, 0] | (bq.zero_point[1, 0] << 4) and zeros[0, 1] == bq.zero_point[2, 0]
    signed = quantize_blocks(w, QType(4, True, True), 16, symmetric=True)
    packed, _, none = matmulnbits_arrays(signed, with_zero_point=False)
    assert none is None and packed[0, 0, 0] & 0x0F == signed.values[0, 0] + 8


def test_undo_restores_the_model_and_its_opset_and_domains(tmp_path):
    path, *_ = decoder_like(tmp_path)
    ws = Workspace()
    ws.open(path)
    before = ws.model.to_proto().SerializeToString()
    for fmt in ("qdq", "matmulnbits"):
        ws.quantization.quantize(QuantConfig(weight_only=True, weight_bits=4, weight_format=fmt), samples=1)
        proto = ws.model.to_proto()
        domains = {o.domain: o.version for o in proto.opset_import}
        assert domains.get("") == (21 if fmt == "qdq" else 17)
        assert ("com.microsoft" in domains) == (fmt == "matmulnbits")
        assert not any(n.op_type in ("Constant", "Transpose") for n in proto.graph.node)  # the float weight went
        ws.undo()
        assert ws.model.to_proto().SerializeToString() == before


def test_preview_then_apply_gives_the_same_model(tmp_path):
    path, *_ = decoder_like(tmp_path)
    ws = Workspace()
    ws.open(path)
    config = QuantConfig(weight_only=True, weight_format="matmulnbits", block_size=16)
    preview = ws.quantization.preview(config, samples=2)
    applied = ws.quantization.apply()
    assert applied.output_sqnr_db == preview.result.output_sqnr_db
    assert ws.model.op_counts().get("MatMulNBits") == 2


def test_cli_weight_only_writes_the_model_and_the_error_table(tmp_path, capsys):
    path, *_ = decoder_like(tmp_path)
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    assert main(["quantize", path, "-o", str(out), "--weight-only", "--block-size", "32",
                 "--weight-format", "matmulnbits", "--no-symmetric-weights", "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "weight-only: 2 MatMul weights as uint4 blocks of 32" in printed and "output SQNR:" in printed
    assert "(asymmetric, matmulnbits), 15.4 KB -> 3.3 KB" in printed  # (72·48 + 48·10) · 4 bytes, not "0.0 MB"
    data = json.loads(report.read_text())
    assert data["weight_only"]["format"] == "matmulnbits" and data["config"]["weight_bits"] == 4
    assert {row["node"] for row in data["layers"]} == {"up", "down"}
    assert all(row["local_sqnr_db"] > 15 and row["sqnr_db"] > 10 for row in data["layers"])
    assert data["weight_only"]["stored_bytes"] < data["weight_only"]["float_bytes"] / 4
    x = np.ones((2, 5, K), np.float32)
    assert run(out, x).shape == (2, 5, N)


def test_bad_block_size_is_one_line_and_exit_2(tmp_path, capsys):
    path, *_ = decoder_like(tmp_path)
    assert main(["quantize", path, "-o", str(tmp_path / "q.onnx"), "--weight-only", "--block-size", "24"]) == 2
    assert "block size must be a power of two" in capsys.readouterr().err


def test_nothing_to_quantize_names_why(tmp_path):
    model = models.make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                              [models.tensor("x", TensorProto.FLOAT, [2, 4]),
                               models.tensor("w", TensorProto.FLOAT, [4, 3])],
                              [models.tensor("y", TensorProto.FLOAT, [2, 3])], opset=17)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    ws = Workspace()
    ws.open(path)
    with pytest.raises(Exception, match="nothing to quantize.*mm: its weight is not a constant"):
        ws.quantization.quantize(QuantConfig(weight_only=True), samples=1)


def test_cancel_leaves_the_model_as_it_was(tmp_path):
    path, *_ = decoder_like(tmp_path)
    ws = Workspace()
    ws.open(path)
    before = ws.model.to_proto().SerializeToString()
    fractions: list[float] = []
    with pytest.raises(Cancelled):
        ws.quantization.quantize(QuantConfig(weight_only=True, weight_bits=4), samples=4,
                    task=Task(progress=fractions.append, cancelled=lambda: len(fractions) >= 2))
    assert ws.model.to_proto().SerializeToString() == before and ws.quantization.applied is None


def test_weights_in_external_data(tmp_path):
    path, w_up, w_down = decoder_like(tmp_path)
    model = onnx.load(path)
    external = tmp_path / "ext" / "decoder.onnx"
    external.parent.mkdir()
    onnx.save(model, external, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
              size_threshold=0)
    ws = Workspace()
    ws.open(external)
    config = QuantConfig(weight_only=True, weight_bits=4, weight_format="matmulnbits")
    result = ws.quantization.quantize(config, samples=2)
    assert {row.node for row in result.layers} == {"up", "down"}
    out = tmp_path / "q.onnx"
    ws.save_as(out)
    x = np.random.default_rng(3).standard_normal((2, 5, K)).astype(np.float32)
    expected = np.maximum(x @ numpy_blocks(w_up, 4, 32, True), 0) @ numpy_blocks(w_down, 4, 32, True)
    np.testing.assert_allclose(run(out, x), expected, rtol=1e-4, atol=1e-4)


def classifier_head(tmp_path, alpha: float = 1.0) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """x [3, K] -> Gemm 'fc1' (W1 stored [HIDDEN, K], transB = 1, bias: how exporters write nn.Linear) -> Relu
    -> Gemm 'fc2' (W2 [HIDDEN, N], transB = 0, no bias, ``alpha``) -> y; the file, W1 and W2 as [K, N], b1."""
    rng = np.random.default_rng(11)
    w1 = rng.normal(0, 0.3, [K, HIDDEN]).astype(np.float32)
    w1[:, 5] *= 15
    b1 = rng.normal(0, 0.5, [HIDDEN]).astype(np.float32)
    w2 = rng.normal(0, 0.3, [HIDDEN, N]).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("Gemm", ["hr", "w2"], ["y"], name="fc2", alpha=alpha)]
    model = models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, [3, K])],
                              [models.tensor("y", TensorProto.FLOAT, [3, N])],
                              [models.init("w1", np.ascontiguousarray(w1.T)), models.init("b1", b1),
                               models.init("w2", w2)], opset=13)
    path = tmp_path / "head.onnx"
    onnx.save(model, path)
    return str(path), w1, w2, b1


@pytest.mark.parametrize(("fmt", "bits", "symmetric"), CASES)
def test_gemm_weights_in_blocks_along_k_either_way_they_are_stored(tmp_path, fmt, bits, symmetric):
    """A transB weight [N, K] is blocked along its axis 1 (K), not along N: the same numbers as the [K, N] one."""
    path, w1, w2, b1 = classifier_head(tmp_path)
    ws = Workspace()
    ws.open(path)
    before = ws.model.to_proto().SerializeToString()
    config = QuantConfig(weight_only=True, weight_bits=bits, block_size=32, weight_format=fmt,
                         symmetric_weights=symmetric)
    x = np.random.default_rng(3).standard_normal((2, 3, K)).astype(np.float32)
    result = ws.quantization.quantize(config, CalibrationData({"x": x}, "test samples"))
    out = tmp_path / "q.onnx"
    ws.save_as(out)
    saved = onnx.load(out)
    onnx.checker.check_model(saved, full_check=fmt == "qdq")
    assert [v.name for v in saved.graph.input] == ["x"] and [v.name for v in saved.graph.output] == ["y"]
    assert "Gemm" not in {n.op_type for n in saved.graph.node} or fmt == "qdq"
    one, two = numpy_blocks(w1, bits, 32, symmetric), numpy_blocks(w2, bits, 32, symmetric)
    expected = np.maximum(x @ one + b1, 0) @ two
    np.testing.assert_allclose(np.stack([run(out, s) for s in x]), expected, rtol=1e-4, atol=1e-4)
    rows = {row.node: row for row in result.layers}
    assert set(rows) == {"fc1", "fc2"} and result.layer_ops == {"Gemm": 2}
    assert rows["fc1"].local_sqnr_db == pytest.approx(sqnr(w1, one), abs=0.01)
    assert rows["fc2"].sqnr_db == pytest.approx(sqnr(np.maximum(x @ w1 + b1, 0) @ w2, expected), abs=0.01)
    assert any(line.startswith("weight-only: 2 Gemm weights as") for line in result.lines())
    ws.undo()
    assert ws.model.to_proto().SerializeToString() == before


def test_a_gemm_matmulnbits_cannot_express_is_left_float_saying_so(tmp_path):
    path, w1, w2, b1 = classifier_head(tmp_path, alpha=0.5)
    ws = Workspace()
    ws.open(path)
    result = ws.quantization.quantize(QuantConfig(weight_only=True, weight_format="matmulnbits"), samples=2)
    assert [row.node for row in result.layers] == ["fc1"]
    assert result.skipped == [("fc2", "a Gemm with transA, alpha or beta has no MatMulNBits form "
                                      "(--weight-format qdq quantizes it)")]
    assert any(line.startswith("left float: 1 layer ('fc2': a Gemm with transA") for line in result.lines())
    ws.undo()
    qdq = ws.quantization.quantize(QuantConfig(weight_only=True, weight_format="qdq"), samples=2)
    assert {row.node for row in qdq.layers} == {"fc1", "fc2"}


@pytest.mark.parametrize(("changes", "expected"), [
    ({"method": "entropy"}, "calibration method 'entropy' does not apply to weight-only blocks"),
    ({"bias_correction": True}, "bias correction does not apply to weight-only blocks"),
    ({"equalize": "on"}, "equalization 'on' does not apply to weight-only blocks"),
    ({"target_score": 0.5}, "no sensitivity scan or target SQNR or score"),
    ({"target_sqnr_db": 30.0}, "no sensitivity scan or target SQNR or score"),
    ({"weight_only": False, "block_size": 64}, "a block size or weight format is for weight-only blocks"),
    ({"weight_only": False, "weight_format": "matmulnbits"}, "a block size or weight format is for weight-only"),
    ({"seed": -1}, "seed must be 0 or more, not -1"),
])
def test_settings_that_would_change_nothing_are_refused_not_ignored(changes, expected):
    with pytest.raises(Exception, match=expected):
        QuantConfig(**{"weight_only": True, **changes})


def test_the_evaluate_score_of_a_weight_only_model_is_reported(tmp_path, capsys):
    """The script scores the model written (its MatMulNBits runs); one that raises is one line naming it."""
    path, *_ = decoder_like(tmp_path)
    script = tmp_path / "score.py"
    script.write_text("import onnx\n\ndef evaluate(path):\n"
                      "    return float(sum(n.op_type == 'MatMulNBits' for n in onnx.load(path).graph.node))\n")
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    assert main(["quantize", path, "-o", str(out), "--weight-only", "--weight-format", "matmulnbits",
                 "--evaluate", str(script), "--report", str(report)]) == 0
    assert "; score: 2" in capsys.readouterr().out and json.loads(report.read_text())["score"] == 2.0
    script.write_text("def evaluate(path):\n    raise RuntimeError('no OCR here')\n")
    assert main(["quantize", path, "-o", str(out), "--weight-only", "--evaluate", str(script)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graphlens: score.py: evaluate('") and err.endswith("raised RuntimeError: no OCR here")


def test_a_weight_too_large_to_evaluate_behind_constant_of_shape_is_quantized(monkeypatch):
    """onnx's light zoo writes every weight as ConstantOfShape; VGG-19's first fully connected one (392 MB) is past
    constant evaluation's limit and was left float as "not a constant"."""
    import graphlens.core.constants as constants
    from graphlens.core.model import Model
    from graphlens.quantize import quantize_model

    monkeypatch.setattr(constants, "MAX_EVALUATED_BYTES", 1000)
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["w"], name="fill",
                              value=onnx.numpy_helper.from_array(np.array([0.25], np.float32))),
             helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    model = Model(models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, [2, 64])],
                                    [models.tensor("y", TensorProto.FLOAT, [2, 32])],
                                    [models.init("shape", np.array([64, 32], np.int64))], opset=17))
    assert model.graph.constant_value("w") is None  # 8 KB: past the (lowered) limit
    result = quantize_model(model, QuantConfig(weight_only=True, weight_bits=4), samples=1)
    assert [row.node for row in result.layers] == ["fc"] and result.output_sqnr_db == float("inf")
