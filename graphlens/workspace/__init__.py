"""The Qt-free application model behind the window, the command line and scripts."""

from graphlens.core.task import Cancelled, Task
from graphlens.workspace.events import WorkspaceEvents
from graphlens.workspace.jobs import Dropped, Job
from graphlens.workspace.results import (
    Applied,
    BnLessonResult,
    ExplainResult,
    FoldResult,
    MatchesResult,
    Opened,
    PreviewInputs,
    RewritePreview,
    RewritePreviewRequest,
    Saved,
    Step,
)
from graphlens.workspace.rewrite_preview import compute_rewrite_preview
from graphlens.workspace.workspace import Workspace, rules_for

__all__ = [
    "Applied",
    "Cancelled",
    "Dropped",
    "ExplainResult",
    "FoldResult",
    "Job",
    "BnLessonResult",
    "MatchesResult",
    "Opened",
    "PreviewInputs",
    "RewritePreviewRequest",
    "RewritePreview",
    "Saved",
    "Step",
    "Task",
    "Workspace",
    "WorkspaceEvents",
    "compute_rewrite_preview",
    "rules_for",
]
