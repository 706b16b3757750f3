"""The workspace's comparison feature keeps one comparison, announces each with its own typed event, and drops it
when the model changes (before the edit or the new model is announced)."""

from __future__ import annotations

from graphlens.compare import Comparison
from graphlens.core.model import Model
from graphlens.workspace import Workspace
from tests.compare.models import chain


def test_a_comparison_is_kept_announced_and_dropped_by_a_new_model(tmp_path):
    path = tmp_path / "b.onnx"
    Model(chain(pads=0)).save(path)
    ws = Workspace()
    ws.set_model(Model(chain(pads=1)))
    seen = []
    ws.comparison.events.result.connect(seen.append)
    result = ws.comparison.run(path, numeric=False)
    assert ws.comparison.result is result and seen == [result]
    assert result.counts["changed"] == 1 and result.b.path == path
    ws.fold()  # nothing to fold here; compare again, then open another model
    ws.comparison.run(Model(chain(pads=0)), numeric=False)
    order = []
    ws.comparison.events.result.connect(lambda value: order.append(("result", value)))
    ws.events.opened.connect(lambda opened: order.append(("opened", opened)))
    ws.set_model(Model(chain()))
    assert ws.comparison.result is None and seen[-1] is None
    assert [name for name, _ in order] == ["result", "opened"], "views hear the drop before the new model"


def test_an_edit_drops_the_comparison():
    from tests.models import conv_bn

    ws = Workspace()
    ws.set_model(Model(conv_bn()))
    ws.comparison.run(Model(conv_bn()), numeric=False)
    seen = []
    ws.comparison.events.result.connect(seen.append)
    ws.fold()
    assert ws.comparison.result is None and seen == [None]


def test_the_result_event_is_typed_and_fires_only_for_another_object():
    ws = Workspace()
    ws.set_model(Model(chain(pads=1)))
    (new, _old) = ws.comparison.events.result.signature.parameters.values()
    assert "Comparison" in str(new.annotation)
    seen = []
    ws.comparison.events.result.connect(seen.append)
    result = ws.comparison.run(Model(chain(pads=0)), numeric=False)
    ws.comparison.result = result  # the same object again: nothing new to announce
    assert seen == [result] and isinstance(result, Comparison)
