"""Per-node overlays: any number per node (latency, FLOPs, parameters, bytes, a quantization error,
a CSV column) coloured on the canvas, listed in a table, read and written as CSV or Model
Explorer node data. No Qt: the window, the command line and scripts share it."""

from graphlens.overlays.files import (
    attach,
    from_csv,
    from_model_explorer_json,
    load_overlay,
    save_overlay,
    to_csv,
    to_model_explorer_json,
)
from graphlens.overlays.flops import METRICS, NodeCost, metric_overlay, node_costs
from graphlens.overlays.overlay import Overlay, format_value, item_values, scale_colours
from graphlens.overlays.profile import ProfileResult, profile_model

__all__ = [
    "METRICS",
    "NodeCost",
    "Overlay",
    "ProfileResult",
    "attach",
    "format_value",
    "from_csv",
    "from_model_explorer_json",
    "item_values",
    "load_overlay",
    "metric_overlay",
    "node_costs",
    "profile_model",
    "save_overlay",
    "scale_colours",
    "to_csv",
    "to_model_explorer_json",
]
