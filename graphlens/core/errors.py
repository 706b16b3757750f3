"""Errors that reach users as one line of text.

Every message names the file or node and the problem, so the CLI can print it as is
(exit code 2) and the GUI can show it in a dialog without a traceback.
"""

from __future__ import annotations


class GraphLensError(Exception):
    """A problem the user can act on; its message is shown verbatim."""


class ModelLoadError(GraphLensError):
    """The file is not a usable ONNX model."""


class SaveError(GraphLensError):
    """The model could not be written; nothing on disk was changed."""


class MalformedValueError(GraphLensError, ValueError):
    """A value in the file that cannot be read as it is declared: an attribute of another type than its operator
    takes, a tensor whose data does not fit its dims or whose element type ONNX does not define. A ValueError too,
    so that code which reads values it may do without (constant evaluation, the window's inspector) still says
    why in place of the value."""
