"""The workspace holds the overlay the views colour by, and a new model drops it."""

from __future__ import annotations

from graphlens.overlays import Overlay, metric_overlay
from graphlens.workspace import Workspace


def test_set_overlay_is_announced_and_a_new_model_drops_it(demo_path):
    ws = Workspace()
    ws.open(demo_path)
    seen = []
    ws.events.overlay_changed.connect(seen.append)
    flops = ws.set_overlay(metric_overlay(ws.model, "flops"))
    assert ws.overlay is flops and seen == [flops]
    ws.set_overlay(Overlay.of("error", {"/stem/conv": 0.1}))  # any dict[node, float]
    assert ws.overlay.values == {"/stem/conv": 0.1}
    ws.open(demo_path)
    assert ws.overlay is None
