"""Names vulture reports as unused that are called from outside Python code it can see.

Checked by tests/test_code_health.py (``vulture graphlens tests benchmarks tools/vulture_whitelist.py``).
Each line is an attribute access on a dummy object; vulture counts it as a use.
"""

from types import SimpleNamespace

_ = SimpleNamespace()

# Qt calls these overrides of QWidget / QAbstractItemModel methods.
_.paintEvent
_.wheelEvent
_.mousePressEvent
_.mouseMoveEvent
_.mouseReleaseEvent
_.mouseDoubleClickEvent
_.contextMenuEvent
_.leaveEvent
_.keyPressEvent
_.hasHeightForWidth
_.resizeEvent
_.closeEvent
_.dragEnterEvent
_.dropEvent
_.sizeHint
_.columnCount
_.headerData

# networkx's GraphMatcher calls these overrides during VF2.
_.syntactic_feasibility
_.candidate_pairs_iter

# onnxruntime reads these SessionOptions fields; CalibrationDataReader's protocol (benchmarks).
_.log_severity_level
_.enable_cpu_mem_arena
_.enable_mem_pattern
_.enable_profiling
_.profile_file_prefix
_.optimized_model_filepath
_.get_next
_.rewind
_._external_data  # keeps the mapped weight files open for as long as the session lives

# Module-level __getattr__ (PEP 562): lazy imports of the package's public names.
_.__getattr__

# The pattern-building functions of graphlens.patterns.ir, public API for patterns written in Python.
_.attr_eq
_.attr_ne
_.attr_absent
_.attr_approx
_.attr_pred
_.one_of

# pytest fixtures, requested by name for their side effects.
_.qapp
_.isolated_settings

# Bound by name: menu actions (the `method=` column of graphlens/gui/menus.py's table), workspace events
# (emitted by name through graphlens/workspace/slots.py), a builder a benchmark child process imports.
_.zoom_out
_.search_next
_.search_previous
_.expand_groups
_.back_to_parent
_.show_tensor_shapes
_.ask_open
_.ask_export_visible
_.ask_compare
_.show_shortcuts
_.show_about
_.preview_inputs_changed
_.build_inline

# Fields of the quantize report's LayerError, read from its JSON (dataclasses.asdict).
_.local_mse
_.local_cosine
_.local_max_abs
