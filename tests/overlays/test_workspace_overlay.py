"""The workspace holds the overlay the views colour by, and a new model drops it."""

from __future__ import annotations

from graphlens.overlays import Overlay, metric_overlay
from graphlens.workspace import Workspace


def test_set_overlay_is_announced_and_a_new_model_drops_it(demo_path):
    ws = Workspace()
    ws.open(demo_path)
    seen = []
    ws.overlay.events.shown.connect(seen.append)
    flops = ws.overlay.show(metric_overlay(ws.model, "flops"))
    assert ws.overlay.shown is flops and seen == [flops]
    ws.overlay.show(Overlay.of("error", {"/stem/conv": 0.1}))  # any dict[node, float]
    assert ws.overlay.shown.values == {"/stem/conv": 0.1}
    ws.open(demo_path)
    assert ws.overlay.shown is None
