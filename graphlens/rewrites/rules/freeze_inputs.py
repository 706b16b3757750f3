"""freeze-inputs (off by default): initializers listed as graph inputs become plain constants.

From IR 4 on, an initializer that is also a graph input is only a default: a caller may feed
another value at run time, so no rewrite may treat it as a constant. Exporters often list weights
that way without meaning it (PyTorch's ``keep_initializers_as_inputs``, caffe2, early tf2onnx).
This rule removes such initializers from the graph's input list, as onnxruntime's
``remove_initializer_from_input`` tool does; their values do not change, and the inputs a caller
must feed stay the same. In IR < 4 files they are constants already, so there is nothing to do.
"""

from __future__ import annotations

from graphlens.core.model import Model
from graphlens.matching.match import Match
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.rule import Refusal, Rule


class FreezeInputs(Rule):
    name = "freeze-inputs"
    description = "remove initializers from the graph inputs so they count as constants"
    default = False

    def plan(self, match: Match) -> Refusal:  # pragma: no cover - no patterns
        return self.refuse(match, "freeze-inputs works on the whole model, not on a match")

    def model_edits(self, model: Model) -> list[GraphEdit]:
        edits = []
        for graph in model.graphs():
            names = graph.overridable_initializers
            if names:
                plural = "s" if len(names) != 1 else ""
                edits.append(GraphEdit(
                    graph.path, self.name,
                    f"make {len(names)} initializer{plural} listed as graph input{plural} constant",
                    drop_inputs=names,
                ))
        return edits
