"""One sentence for a node name the model does not have, wherever a name is given (--exclude, --select, --at)."""

from __future__ import annotations

import pytest

from graphlens.core.errors import GraphLensError
from graphlens.core.names import check_node_names, no_such_node

KNOWN = ["/stem/conv", "/stem/bn", "/stem/relu", "/head/gemm"]


def test_the_sentence_names_the_option_the_node_the_place_and_the_closest_names():
    error = no_such_node("/stem/cnv", KNOWN, "--exclude", "model.onnx")
    assert str(error).startswith("--exclude: no node named '/stem/cnv' in model.onnx; did you mean '/stem/conv'")


def test_without_a_close_name_there_is_no_guess():
    assert str(no_such_node("zzz", KNOWN)) == "no node named 'zzz'"


def test_the_first_unknown_name_is_refused_and_known_ones_pass():
    check_node_names(["/stem/bn", "/head/gemm"], KNOWN, "exclude")
    with pytest.raises(GraphLensError, match="^layers: no node named 'nope' in the model$"):
        check_node_names(["/stem/bn", "nope", "other"], KNOWN, "layers")
