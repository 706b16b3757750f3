"""equalize: cross-layer equalization leaves the float outputs alone, evens out the channels, and helps int8."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphlens.core.model import Model
from graphlens.quantize import QuantConfig, quantize_model
from graphlens.quantize.calibrate import random_calibration
from graphlens.workspace import Workspace
from tests import models
from tests.rewrites.checks import array, assert_rewrite_is_sound, op_types
from tests.rewrites.test_fold_bn import fold

SPREAD = 10.0 ** np.array([-1.5, 1.0, -0.5, 1.5, 0.0, -1.0])
"""Layer 1's output channels scaled by these: ranges three decades apart, as a model that needs equalizing has."""


def _weight(rng, kind: str, c_in: int, c_out: int, group: int, trans_b: int, spread: np.ndarray | None) -> np.ndarray:
    """A layer's weight, its output channel o multiplied by spread[o] (written out per layout, not via the
    rule's code)."""
    if kind == "Conv":
        w = rng.normal(0, 0.5, (c_out, c_in // group, 3, 3))
        return w if spread is None else w * spread[:, None, None, None]
    if kind == "ConvTranspose":
        w = rng.normal(0, 0.5, (c_in, c_out // group, 3, 3))
        if spread is not None:
            per_in, per_out = c_in // group, c_out // group
            for i in range(c_in):
                g = i // per_in
                w[i] *= spread[g * per_out:(g + 1) * per_out, None, None]
        return w
    w = rng.normal(0, 0.5, (c_out, c_in) if trans_b else (c_in, c_out))
    return w if spread is None else w * (spread[:, None] if trans_b else spread[None, :])


def _divide_inputs(w: np.ndarray, kind: str, group: int, trans_b: int, factors: np.ndarray) -> np.ndarray:
    """The weight with input channel c divided by factors[c], written out per layout."""
    w = w.copy()
    if kind == "Conv":
        per_out, per_in = w.shape[0] // group, w.shape[1]
        for o in range(w.shape[0]):
            w[o] /= factors[(o // per_out) * per_in:(o // per_out + 1) * per_in, None, None]
        return w
    if kind == "ConvTranspose":
        return w / factors[:, None, None, None]
    return w / (factors[None, :] if trans_b else factors[:, None])


def chain(kinds=("Conv", "Conv"), acts=("Relu",), groups=(1, 1), channels=(4, 6, 5), trans_b=(0, 0), seed=0,
          spread=True, dtype=np.float32) -> onnx.ModelProto:
    """x -> layer 'l1' -> [activation 'act1'] -> layer 'l2' -> … -> y.

    With ``spread``, each layer's output channels but the last's are SPREAD apart and the next layer
    makes up for it (as a folded batch norm leaves them): every channel matters to the output, and one
    int8 scale per weight cannot serve both the small and the large ones.
    """
    rng = np.random.default_rng(seed)
    inits, nodes, x = [], [], "x"
    before = None
    for k, kind in enumerate(kinds):
        c_in, c_out = channels[k], channels[k + 1]
        factors = SPREAD[:c_out] if spread and k < len(kinds) - 1 else None
        w = _weight(rng, kind, c_in, c_out, groups[k], trans_b[k], factors)
        if before is not None:
            w = _divide_inputs(w, kind, groups[k], trans_b[k], before)
        before = factors
        b = rng.normal(0, 0.3, c_out) * (factors if factors is not None else 1.0)
        name = f"l{k + 1}"
        inits += [models.init(f"{name}.w", w.astype(dtype)), models.init(f"{name}.b", b.astype(dtype))]
        attrs = ({"transB": trans_b[k]} if kind == "Gemm"
                 else {"group": groups[k], "pads": [1, 1, 1, 1], "kernel_shape": [3, 3]})
        nodes.append(helper.make_node(kind, [x, f"{name}.w", f"{name}.b"], [f"{name}.out"], name=name, **attrs))
        x = f"{name}.out"
        act = acts[k] if k < len(acts) and k < len(kinds) - 1 else None
        if act is not None:
            nodes.append(_activation(act, x, f"act{k + 1}", inits, dtype))
            x = f"act{k + 1}.out"
    nodes[-1].output[0] = "y"
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    shape = [3, channels[0]] if kinds[0] == "Gemm" else [1, channels[0], 8, 8]
    out_shape = [shape[0], channels[-1], *shape[2:]]
    return models.make_model(nodes, [models.tensor("x", elem, shape)], [models.tensor("y", elem, out_shape)], inits)


def _activation(act: str, x: str, name: str, inits: list, dtype) -> onnx.NodeProto:
    if act in ("Relu", "LeakyRelu"):
        return helper.make_node(act, [x], [f"{name}.out"], name=name, **({"alpha": 0.1} if act == "LeakyRelu" else {}))
    bounds = {"Clip0": [0.0], "Relu6": [0.0, 6.0], "ClipInf": [0.0, np.inf]}[act]
    names = [f"{name}.lo", f"{name}.hi"][:len(bounds)]
    inits += [models.init(n, np.array(v, dtype)) for n, v in zip(names, bounds)]
    return helper.make_node("Clip", [x, *names], [f"{name}.out"], name=name)


def ranges_out(w: np.ndarray, kind: str, group: int = 1, trans_b: int = 0) -> np.ndarray:
    """Largest |weight| per output channel, written out per layout."""
    a = np.abs(w)
    if kind == "Conv":
        return a.reshape(a.shape[0], -1).max(axis=1)
    if kind == "ConvTranspose":
        per_in, per_out = a.shape[0] // group, a.shape[1]
        return np.array([a[(o // per_out) * per_in:(o // per_out + 1) * per_in, o % per_out].max()
                         for o in range(group * per_out)])
    return a.max(axis=1) if trans_b else a.max(axis=0)


def ranges_in(w: np.ndarray, kind: str, group: int = 1, trans_b: int = 0) -> np.ndarray:
    """Largest |weight| each input channel is multiplied by, written out per layout."""
    a = np.abs(w)
    if kind == "Conv":
        per_out, per_in = a.shape[0] // group, a.shape[1]
        return np.array([a[(c // per_in) * per_out:(c // per_in + 1) * per_out, c % per_in].max()
                         for c in range(group * per_in)])
    if kind == "ConvTranspose":
        return a.reshape(a.shape[0], -1).max(axis=1)
    return a.max(axis=0) if trans_b else a.max(axis=1)


def weights_of(model: Model, node: str) -> np.ndarray:
    return array(model, model.graph.by_name[node].inputs[1])


CASES = {
    "Conv-Relu-Conv": {},
    "Conv-LeakyRelu-Conv": {"acts": ("LeakyRelu",)},
    "Conv-Clip(0)-Conv": {"acts": ("Clip0",)},
    "Conv-Clip(0, inf)-Conv": {"acts": ("ClipInf",)},
    "Conv-Conv": {"acts": ()},
    "depthwise-pointwise": {"groups": (6, 1), "channels": (6, 6, 5)},
    "grouped Conv pair": {"groups": (2, 3), "channels": (4, 6, 9)},
    "Conv-pointwise float16": {"dtype": np.float16},
    "ConvTranspose-Conv": {"kinds": ("ConvTranspose", "Conv")},
    "Conv-ConvTranspose": {"kinds": ("Conv", "ConvTranspose")},
    "grouped ConvTranspose pair": {"kinds": ("ConvTranspose", "ConvTranspose"), "groups": (2, 3),
                                   "channels": (4, 6, 6)},
    "Gemm-Gemm": {"kinds": ("Gemm", "Gemm")},
    "Gemm-Gemm transB": {"kinds": ("Gemm", "Gemm"), "trans_b": (1, 1)},
}


@pytest.mark.parametrize("case", list(CASES))
def test_equalizing_keeps_the_outputs_and_evens_out_the_channels(case):
    spec = CASES[case]
    kinds, groups = spec.get("kinds", ("Conv", "Conv")), spec.get("groups", (1, 1))
    trans_b = spec.get("trans_b", (0, 0))
    original, model, session, report = fold(chain(**spec), rules=["equalize"])
    assert report.applied["equalize"] == 1, [r.reason for r in report.refused]
    r1 = ranges_out(weights_of(model, "l1").astype(np.float64), kinds[0], groups[0], trans_b[0])
    r2 = ranges_in(weights_of(model, "l2").astype(np.float64), kinds[1], groups[1], trans_b[1])
    np.testing.assert_allclose(r1, r2, rtol=1e-2 if spec.get("dtype") == np.float16 else 1e-5)
    assert [n.name for n in model.graph.nodes] == [n.name for n in onnx.ModelProto.FromString(original).graph.node]
    assert_rewrite_is_sound(original, model, session)


def test_a_chain_of_three_layers_is_equalized_in_sweeps_as_one_edit():
    proto = chain(kinds=("Conv",) * 3, acts=("Relu", "Relu"), groups=(1, 1, 1), channels=(4, 6, 5, 3),
                  trans_b=(0, 0, 0))
    original, model, session, report = fold(proto, rules=["equalize"])
    assert report.applied["equalize"] == 1
    [edit] = report.edits
    assert edit.remove == ["l1", "act1", "l2", "act2", "l3"]
    assert "Conv 'l1' → Relu 'act1' → … → Conv 'l3'" in edit.description
    before = Model(onnx.ModelProto.FromString(original))
    for model_, low, high in ((before, 100.0, np.inf), (model, 1.0, 2.0)):  # 3 decades apart, then within 2×
        w1, w2, w3 = (weights_of(model_, n).astype(np.float64) for n in ("l1", "l2", "l3"))
        for ratio in (ranges_out(w1, "Conv") / ranges_in(w2, "Conv"), ranges_out(w2, "Conv") / ranges_in(w3, "Conv")):
            assert low <= ratio.max() / ratio.min() < high
    [again] = [r.reason for r in report.refused]  # the next round: evening out further would not help
    assert again.startswith("equalizing Conv 'l1' → Relu 'act1' → … → Conv 'l3' would not lower their int8 weight "
                            "quantization error (per tensor ")
    assert_rewrite_is_sound(original, model, session)


def test_the_quantization_trials_rule_makes_the_same_edits_with_short_refusals():
    """The trial reads only the edits: its copy of the rule makes the same ones, and its refusals leave out the
    figures of a trial equalization made for them; the registry's rule keeps them."""
    from graphlens.quantize.equalization import _equalize_rule
    from graphlens.rewrites.driver import fold_model
    from graphlens.rewrites.edit import EditHistory

    proto = chain(kinds=("Conv",) * 3, acts=("Relu", "Relu"), groups=(1, 1, 1), channels=(4, 6, 5, 3),
                  trans_b=(0, 0, 0))
    _, _, _, full = fold(proto, rules=["equalize"])
    model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    short = fold_model(model, _equalize_rule(), EditHistory(model))
    assert [e.description for e in short.edits] == [e.description for e in full.edits]
    assert [r.reason for r in short.refused] == [
        "equalizing Conv 'l1' → Relu 'act1' → … → Conv 'l3' would not lower their int8 weight quantization error"]
    assert full.refused[0].reason.startswith(short.refused[0].reason + " (per tensor ")


def test_the_tensors_between_the_layers_get_new_names_the_output_keeps_its_own():
    original, model, session, _ = fold(chain(), rules=["equalize"])
    assert [n.outputs[0] for n in model.graph.nodes] == ["l1.out.equalized", "act1.out.equalized", "y"]
    assert model.graph.by_name["l1"].inputs[1] == "l1.weight.equalized"
    assert_rewrite_is_sound(original, model, session)


def refusals(proto: onnx.ModelProto) -> list[str]:
    _, model, _, report = fold(proto, rules=["equalize"])
    assert report.applied["equalize"] == 0
    return [r.reason for r in report.refused]


def test_relu6_is_refused_because_its_bound_cannot_be_scaled_per_channel():
    assert refusals(chain(acts=("Relu6",))) == [
        "the upper bound of Clip 'act1' is 6; equalizing needs it divided by each channel's scale, and a Clip takes "
        "one bound for all channels"]


def test_a_layer_whose_output_is_used_elsewhere_is_refused():
    proto = chain()
    proto.graph.output.append(models.tensor("l1.out", TensorProto.FLOAT, [1, 6, 8, 8]))
    assert refusals(proto) == ["the output of Conv 'l1' is also read by the graph's outputs, which would see its "
                               "rescaled channels"]
    proto = chain()
    proto.graph.node.append(helper.make_node("Sigmoid", ["act1.out"], ["side"], name="side"))
    proto.graph.output.append(models.tensor("side", TensorProto.FLOAT, [1, 6, 8, 8]))
    assert refusals(proto) == ["the output of Relu 'act1' is also read by Sigmoid 'side', which would see its "
                               "rescaled channels"]


def test_layers_whose_channels_do_not_line_up_are_refused():
    proto = chain(channels=(4, 6, 5))
    w2 = np.ones((5, 4, 3, 3), np.float32)  # reads 4 channels; the first layer writes 6
    proto.graph.initializer[2].CopyFrom(models.init("l2.w", w2))
    assert refusals(proto) == ["Conv 'l1' has 6 output channels (weight [6, 4, 3, 3]) but Conv 'l2' reads 4 "
                               "(weight [5, 4, 3, 3])"]


def test_a_gemm_reading_its_input_transposed_is_refused():
    proto = chain(kinds=("Gemm", "Gemm"), channels=(4, 6, 6))
    proto.graph.node[-1].attribute.append(helper.make_attribute("transA", 1))
    assert refusals(proto) == ["Gemm 'l2' transposes its input (transA), so its input channels are not Gemm 'l1''s "
                               "output channels"]


def test_a_second_run_finds_the_channels_equalized_already():
    _, model, _, _ = fold(chain(), rules=["equalize"])
    assert refusals(model.to_proto()) == ["the channels of Conv 'l1' and Conv 'l2' are equalized already"]


def test_the_preview_shows_the_float_outputs_unchanged(write_model):
    ws = Workspace()
    ws.open(write_model(chain()))
    before = ws.model.to_proto().SerializeToString()
    preview = ws.rewrite.preview("equalize", 0)
    assert preview.numeric.passed and preview.numeric.boundary
    assert ws.model.to_proto().SerializeToString() == before
    ws.rewrite.apply()
    assert ws.model.graph.by_name["l1"].inputs[1] == "l1.weight.equalized"
    ws.undo()
    assert ws.model.to_proto().SerializeToString() == before


@pytest.mark.parametrize(("spec", "per_channel"), [({}, False), ({"groups": (6, 1), "channels": (6, 6, 5)}, False),
                                                   ({"groups": (6, 1), "channels": (6, 6, 5)}, True)])
def test_equalizing_lowers_the_quantized_output_error(spec, per_channel):
    """Channels three decades apart: one int8 scale per weight loses the small ones; equalized, they survive."""
    proto = chain(**spec)
    sqnr = {}
    for rules in ((), ("equalize",)):
        model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
        data = random_calibration(model.to_proto(), 16, seed=1)
        result = quantize_model(model, QuantConfig(per_channel=per_channel, fold_rules=rules, equalize="off"), data)
        sqnr[rules] = result.output_sqnr_db
        if rules:
            assert result.fold is not None and "equalize: applied 1 time" in result.fold.lines()
            assert op_types(model).count("Conv") == 2
    assert sqnr[("equalize",)] > sqnr[()] + 3.0, sqnr


def _int8_pair_error(w1: np.ndarray, w2: np.ndarray) -> float:
    """Σ_i (e1_i·c_i + a_i·e2_i) / Σ_i a_i·c_i for Gemm weights [K, C] then [C, N], one int8 scale per weight."""
    def q(w):
        step = np.abs(w).max() / 127
        return np.clip(np.rint(w / step), -127, 127) * step
    a, c = (w1 ** 2).sum(axis=0), (w2 ** 2).sum(axis=1)
    e1, e2 = ((w1 - q(w1)) ** 2).sum(axis=0), ((w2 - q(w2)) ** 2).sum(axis=1)
    return float((e1 * c + a * e2).sum() / (a * c).sum())


def test_a_pair_it_would_not_help_is_refused_with_the_errors_computed_independently():
    proto = chain(kinds=("Gemm", "Gemm"), spread=False, seed=4, channels=(3, 4, 3))
    w1, w2 = (onnx.numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer
              if t.name.endswith(".w"))
    s = np.sqrt(np.abs(w1).max(axis=0) / np.abs(w2).max(axis=1))
    before, after = _int8_pair_error(w1, w2), _int8_pair_error(w1 / s[None, :], w2 * s[:, None])
    assert after > before
    [reason] = refusals(proto)
    assert reason.startswith(f"equalizing Gemm 'l1' and Gemm 'l2' would not lower their int8 weight quantization error "
                             f"(per tensor {100 * before:.3g} % → {100 * after:.3g} %, per channel ")


def test_channel_layouts_are_kept_for_small_weights_only(monkeypatch):
    """A small weight's index layouts are computed once and read-only; a large one's are made again each time,
    never held for the process (a 4096×11008 Gemm's would be 360 MB an array)."""
    from graphlens.core.linear import Conv
    from graphlens.rewrites.rules.equalize import arithmetic as em

    op = Conv(group=1)
    small = (8, 4, 3, 3)
    first = em._layout(op, small, "in", "positions")
    assert em._layout(op, small, "in", "positions") is first and not first.flags.writeable
    np.testing.assert_array_equal(first, op.positions(small, "in"))
    monkeypatch.setattr(em, "CACHED_LAYOUT_ENTRIES", 100)
    before = em._cached_layout.cache_info().currsize
    large = em._layout(op, (16, 8, 3, 3), "out", "channel_index")
    np.testing.assert_array_equal(large, op.channel_index((16, 8, 3, 3), "out"))
    assert em._layout(op, (16, 8, 3, 3), "out", "channel_index") is not large
    assert em._cached_layout.cache_info().currsize == before
