"""The workspace keeps one comparison, says so with ``compared``, and drops it when the model changes."""

from __future__ import annotations

from graphlens.core.model import Model
from graphlens.workspace import Workspace
from tests.compare.models import chain


def test_compare_with_emits_and_an_edit_or_new_model_drops_it(tmp_path):
    path = tmp_path / "b.onnx"
    Model(chain(pads=0)).save(path)
    ws = Workspace()
    ws.set_model(Model(chain(pads=1)))
    seen = []
    ws.events.compared.connect(seen.append)
    result = ws.compare_with(path, numeric=False)
    assert ws.comparison is result and seen == [result]
    assert result.counts["changed"] == 1 and result.b.path == path
    ws.fold()  # nothing to fold here; compare again, then edit for real
    ws.compare_with(Model(chain(pads=0)), numeric=False)
    ws.set_model(Model(chain()))
    assert ws.comparison is None and seen[-1] is None


def test_an_edit_drops_the_comparison():
    from tests.models import conv_bn

    ws = Workspace()
    ws.set_model(Model(conv_bn()))
    ws.compare_with(Model(conv_bn()), numeric=False)
    seen = []
    ws.events.compared.connect(seen.append)
    ws.fold()
    assert ws.comparison is None and seen == [None]
