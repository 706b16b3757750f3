"""The overlay itself: any per-node mapping, its colour scale, log scale and worst member."""

from __future__ import annotations

import numpy as np

from graphlens.overlays import Overlay, format_value, scale_colours


def test_any_mapping_becomes_an_overlay_and_non_finite_values_are_dropped():
    overlay = Overlay.of("Quantization error", {"conv": 0.02, "bn": float("nan"), "relu": 0.5})
    assert overlay.values == {"conv": 0.02, "relu": 0.5}
    assert overlay.title == "Quantization error"


def test_log_scale_when_values_span_more_than_two_decades():
    assert Overlay.of("FLOPs", {"a": 10.0, "b": 1e6}).log_scale
    assert not Overlay.of("x", {"a": 1.0, "b": 50.0}).log_scale
    assert not Overlay.of("x", {"a": 0.0, "b": 1e6}).log_scale  # zero cannot sit on a log scale
    assert not Overlay.of("x", {"a": 10.0, "b": 1e6}, log_scale=False).log_scale


def test_worse_is_darker_whichever_way_worse_points():
    high = Overlay.of("latency", {"fast": 1.0, "slow": 1000.0, "mid": 10.0})
    t = high.positions(np.array([1.0, 10.0, 1000.0]))
    assert np.allclose(t, [0.0, 1 / 3, 1.0])  # log scale: 10 is a third of the way
    low = Overlay.of("accuracy", {"a": 0.5, "b": 1.0}, higher_is_worse=False)
    assert np.allclose(low.positions(np.array([0.5, 1.0])), [1.0, 0.0])
    rgb = scale_colours(np.array([0.0, 1.0])).astype(int)
    assert rgb[0].sum() > rgb[1].sum()  # the worst end is the darkest


def test_a_group_shows_its_worst_member():
    overlay = Overlay.of("error", {"a": 1.0, "b": 3.0})
    assert overlay.worst(["a", "b", "c"]) == 3.0
    assert overlay.worst(["c"]) is None
    assert Overlay.of("acc", {"a": 1.0, "b": 3.0}, higher_is_worse=False).worst(["a", "b"]) == 1.0


def test_values_read_as_people_write_them():
    assert format_value(1_230_000, "FLOPs") == "1.23 MFLOPs"
    assert format_value(3 * 1024 * 1024, "B") == "3 MiB"
    assert format_value(2400.0, "µs") == "2.4 ms"
    assert format_value(820.0, "µs") == "820 µs"
    assert format_value(1.25e-5) == "1.25e-05"
    assert format_value(12.0) == "12"


def test_legend_ticks_run_from_min_to_max_with_decades_between():
    ticks = Overlay.of("FLOPs", {"a": 10.0, "b": 1e6}, unit="FLOPs").ticks()
    assert ticks[0] == (0.0, "10 FLOPs") and ticks[-1] == (1.0, "1 MFLOPs")
    assert [label for _, label in ticks[1:-1]] == ["100 FLOPs", "1 kFLOPs", "10 kFLOPs", "100 kFLOPs"]


def test_boxes_get_their_node_value_and_groups_their_worst_member():
    from graphlens.overlays import item_values

    overlay = Overlay.of("error", {"a": 1.0, "b": 3.0, "c": 2.0})
    boxes = [["a"], ["b", "c", "x"], ["x"], []]  # a node, a collapsed group, a node without a value, an input
    assert item_values(overlay, boxes) == {0: 1.0, 1: 3.0}


def test_values_that_are_not_finite_are_said_to_be_left_uncoloured():
    """A layer quantized exactly has an infinite SQNR: the legend used to read "0 nodes, 0 dB to 0 dB" alone."""
    from graphlens.overlays import Overlay

    overlay = Overlay.of("Quantization SQNR", {"a": float("inf"), "b": float("inf"), "c": 30.0}, "dB",
                         higher_is_worse=False)
    assert overlay.values == {"c": 30.0}
    assert overlay.notes == ["2 nodes not coloured: their values are not finite (such as 'a': inf)"]
