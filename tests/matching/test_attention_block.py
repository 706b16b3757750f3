"""The attention-block patterns: a whole multi-head attention block, its projections included, in each exporter's form.

``attention-block`` reads separate Q, K and V projections, ``attention-block-packed`` one packed
QKV projection cut by Slices. Each form must match once, and the match must be the whole block:
every node on the way from the block's input to its output projection, none of the shape
arithmetic beside it. A block that is not one (K and V projected from different tensors, a Softmax
whose probabilities are not multiplied by V or are read elsewhere too, a MatMul by a weight that is
not constant) must not match, and explain must name the node where it stops being one.
"""

from __future__ import annotations

import onnx
import pytest

from graphlens.core.model import load_model
from graphlens.matching.explain import explain
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern
from tests.matching import attention_block_models as abm
from tests.rewrites import transformer_attention_models as am

form = abm.form

SEPARATE = {
    "TorchScript eager (BERT): Kᵀ by [0, 2, 3, 1], Mul after, a mask, shapes from x":
        form(mask=True, shapes="computed"),
    "no biases at all": form(biases=""),
    "biases after the MatMul, Add(MatMul, b)": form(bias_first=False),
    "Kᵀ by a separate Transpose [0, 1, 3, 2], Div after, a mask": form(kt="transpose", scale="div_after", mask=True),
    "Kᵀ by a separate Transpose, no mask": form(kt="transpose", scale="div_after"),
    "Kᵀ by [0, 2, 3, 1], no mask, no scale (T5)": form(scale="none", biases=""),
    "HF eager Whisper: query scaled before its heads split, no bias on K, dynamo's CastLike weights":
        form(biases="qvo", scale="prescale", weights="castlike"),
    "TorchScript sdpa (BART): √scale from Q's shape on Q and on Kᵀ": form(scale="split_shape", shapes="computed"),
    "torch.export sdpa: Kᵀ by Reshape/Transpose/Reshape, √scale on Q and Kᵀ, a mask":
        form(kt="dynamo", scale="split", weights="castlike", biases="", mask=True),
    "torch.export sdpa after fuse-rotary (SmolLM)":
        form(kt="dynamo", scale="split", weights="castlike", biases="", mask=True, rotary=True),
    "TorchScript eager LLaMA after fuse-rotary: Div after":
        form(kt="transpose", scale="div_after", biases="", rotary=True),
    "TorchScript sdpa LLaMA after fuse-rotary: √scale on Q and Kᵀ":
        form(kt="transpose", scale="split", biases="", rotary=True),
    "cross-attention: K and V projected from the encoder's output": form(kv_input="memory", mask=True),
}

PACKED = {
    "constant Slice bounds": form(qkv="packed"),
    "rxnmap: Slice bounds from the projection's Shape, shapes from x, a mask":
        form(qkv="packed", bounds="computed", shapes="computed", mask=True),
    "no biases, Kᵀ by a separate Transpose, Div after":
        form(qkv="packed", biases="", kt="transpose", scale="div_after"),
    "Kᵀ by [0, 2, 3, 1], bias after the MatMul, no mask": form(qkv="packed", bias_first=False),
}

# forms of the fuse-attention tests' builders (no output bias there), and the pattern that reads each
ATTENTION_FORMS = {
    "separate, Mul after": (am.variant(), "attention-block"),
    "separate, K transposed apart, causal Where": (am.variant(kt="transpose", scale="div_after", mask="where_causal"),
                                                   "attention-block"),
    "separate, torch.export sdpa, causal mask": (am.variant(kt="dynamo", scale="split", mask="causal_const"),
                                                 "attention-block"),
    "separate, TorchScript sdpa": (am.variant(scale="torchscript"), "attention-block"),
    "separate, query projection scaled": (am.variant(scale="none", bias=False), "attention-block"),
    "packed, shapes from x, a mask": (am.variant(qkv="packed_slice", split_shape="concat", merge="concat", mask="add"),
                                      "attention-block-packed"),
    "packed, merged to rows": (
        am.variant(qkv="packed_slice", bias=False, kt="transpose", scale="div_after", merge="rows"),
        "attention-block-packed"),
}

CONSTANT_OPS = {"Constant", "CastLike"}
"""Ops whose output is a constant here: a value of the match, not a node of it."""


@pytest.fixture
def search(write_model):
    """Run a built-in pattern over a model, written to disk and loaded as the viewer loads it."""

    def run(pattern_name: str, model: onnx.ModelProto):
        onnx.checker.check_model(model, full_check=True)
        return find_matches(get_pattern(pattern_name), load_model(write_model(model)))

    return run


@pytest.fixture
def why_not(write_model):
    """explain at the Softmax of a model."""

    def run(pattern_name: str, model: onnx.ModelProto):
        onnx.checker.check_model(model, full_check=True)
        return explain(get_pattern(pattern_name), load_model(write_model(model)), at="softmax")

    return run


def block_nodes(model: onnx.ModelProto) -> set[str]:
    """The nodes on the data path from the block's inputs: what one match of the block must cover.

    Shape starts the shape arithmetic beside the block (the heads-split shapes, the Slices' bounds,
    the scale computed from Q's shape), which is none of the block's nodes.
    """
    reached = {"x", "memory"}
    names: set[str] = set()
    for node in model.graph.node:
        if node.op_type in CONSTANT_OPS | {"Shape"} or not reached.intersection(node.input):
            continue
        names.add(node.name)
        reached.update(node.output)
    return names


def projections(f: abm.BlockForm) -> dict[str, str]:
    """Pattern label -> node name of the projections a match of ``f`` binds."""
    if f.qkv == "packed":
        found = {"qkv": "qkv_proj", "q_slice": "q_slice", "k_slice": "k_slice", "v_slice": "v_slice"}
        found.update({"qkv_bias": "qkv_bias"} if "q" in f.biases else {})
    else:
        found = {f"{side}_proj": f"{side}_proj" for side in "qkv"}
        found.update({f"{side}_bias": f"{side}_bias" for side in "qkv" if side in f.biases})
    found["o_proj"] = "o_proj"
    found.update({"o_bias": "o_bias"} if "o" in f.biases else {})
    return found


# ----------------------------------------------------------------------------- what matches
@pytest.mark.parametrize("name", list(SEPARATE))
def test_separate_projections_match_as_one_whole_block(search, name):
    f = SEPARATE[name]
    model = abm.build(f)
    [match] = search("attention-block", model)
    assert {label: node for label, node in match.nodes.items() if label in projections(f)} == projections(f)
    assert set(match.nodes.values()) == block_nodes(model)
    assert (match.nodes["probs"], match.nodes["attn"], match.nodes["out"]) == ("softmax", "context", "out")
    assert search("attention-block-packed", model) == []


@pytest.mark.parametrize("name", list(PACKED))
def test_a_packed_projection_matches_as_one_whole_block(search, name):
    f = PACKED[name]
    model = abm.build(f)
    [match] = search("attention-block-packed", model)
    assert {label: node for label, node in match.nodes.items() if label in projections(f)} == projections(f)
    assert set(match.nodes.values()) == block_nodes(model)
    assert search("attention-block", model) == []


@pytest.mark.parametrize("name", list(ATTENTION_FORMS))
def test_the_fusion_tests_blocks_match_with_their_projections(search, name):
    attention_form, pattern = ATTENTION_FORMS[name]
    [match] = search(pattern, am.build(attention_form))
    first = "qkv_proj" if pattern.endswith("packed") else "q_proj"
    assert match.nodes["o_proj"] == "o_proj" and first in match.nodes.values()


def test_self_attention_binds_one_input_and_cross_attention_two(search):
    [self_attention] = search("attention-block", abm.build(form()))
    [cross] = search("attention-block", abm.build(form(kv_input="memory")))
    assert (self_attention.values["x"], self_attention.values["x_kv"]) == ("x", "x")
    assert (cross.values["x"], cross.values["x_kv"]) == ("x", "memory")


def test_each_layer_is_its_own_match(search):
    """Two blocks in a row, one mask: the second reads the first's output projection, the first match's output."""
    model, second = abm.build(form(mask=True)), abm.build(form(mask=True))

    def in_second(name: str) -> str:
        return {"x": "o_bias", "attention_bias": name}.get(name, f"l1/{name}")

    for node in second.graph.node:
        node.name = in_second(node.name)
        node.input[:] = [in_second(i) for i in node.input]
        node.output[:] = [in_second(o) for o in node.output]
    for initializer in second.graph.initializer:
        initializer.name = in_second(initializer.name)
    model.graph.node.extend(second.graph.node)
    model.graph.initializer.extend(second.graph.initializer)
    model.graph.output[0].name = "l1/o_bias"
    matches = search("attention-block", model)
    assert [(m.nodes["q_proj"], m.nodes["o_bias"]) for m in matches] == [("q_proj", "o_bias"),
                                                                        ("l1/q_proj", "l1/o_bias")]


# ------------------------------------------------------------------------ what does not match
NOT_BLOCKS = {
    # form, the node explain names, what its message says
    "K and V projected from different tensors": (
        form(kv_input="v_from_memory", bias_first=False), "v_proj",
        "the same value 'x_kv' is 'x' elsewhere in the match"),
    "K and V from different tensors, no biases": (
        form(kv_input="v_from_memory", biases="", kt="dynamo", scale="split"), "v_proj", "'x_kv' is 'x' elsewhere"),
    "a Softmax not followed by ·V (rxnmap's last layer)": (
        form(after_softmax="reduced_only"), "reduce", "goes to ReduceSum 'reduce', where MatMul was expected"),
    "the probabilities also summed into an output": (
        form(after_softmax="also_reduced"), "softmax", "has 2 consumers ('reduce', 'context')"),
    "a MatMul by a graph input, not a projection": (
        form(weights="q_input"), "q_proj", "input 1 (wq) of MatMul 'q_proj'"),
}


@pytest.mark.parametrize("name", list(NOT_BLOCKS))
def test_what_is_not_one_block_does_not_match_and_explain_names_where(search, why_not, name):
    f, node, phrase = NOT_BLOCKS[name]
    model = abm.build(f)
    assert search("attention-block", model) == []
    result = why_not("attention-block", model)
    assert not result.matched
    assert result.failure is not None and result.failure.node == node, result.message
    assert phrase in result.message


def test_a_packed_softmax_not_followed_by_v_is_named_by_explain(search, why_not):
    model = abm.build(form(qkv="packed", bounds="computed", after_softmax="reduced_only"))
    assert search("attention-block-packed", model) == []
    result = why_not("attention-block-packed", model)
    assert result.failure is not None and result.failure.node == "reduce"
    assert result.message == "the output of Softmax 'softmax' goes to ReduceSum 'reduce', where MatMul was expected"


def test_explain_at_a_whole_block_says_it_matches_and_lists_the_projections(why_not):
    result = why_not("attention-block", abm.build(form(biases="qvo", scale="prescale", weights="castlike")))
    assert result.matched
    labels = ("q_proj", "q_bias", "q_pre", "k_proj", "v_proj", "o_proj", "o_bias")
    assert [result.mapping[label] for label in labels] == [
        "q_proj", "q_bias", "q_prescale", "k_proj", "v_proj", "o_proj", "o_bias"]


@pytest.mark.parametrize("pattern, f", [("attention-block", form(mask=True)),
                                        ("attention-block-packed", form(qkv="packed", bounds="computed", mask=True))])
def test_explain_agrees_with_the_matcher_at_every_node(write_model, pattern, f):
    model = load_model(write_model(abm.build(f)))
    in_a_match = {n for m in find_matches(get_pattern(pattern), model) for n in m.nodes.values()}
    assert in_a_match
    for node in model.graph.nodes:
        result = explain(get_pattern(pattern), model, at=node.name)
        assert result.matched == (node.name in in_a_match), (node.name, result.message)
