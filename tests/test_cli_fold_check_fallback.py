"""``fold --check`` does not make a fusion the check rejects: the fold is made again without it and written, its
sites left with the check's reason."""

from __future__ import annotations

import onnx

from graphlens.cli import main
from graphlens.rewrites.rules.fusion import MS_DOMAIN, Fused, TargetOp
from graphlens.rewrites.rules.transformers.gelu import FuseFastGelu
from tests.rewrites import transformer_gelu_models as gm


def _exact_gelu_for_tanh(self, site):
    """A fused kernel that is off by more than float32's tolerance: the exact GELU where the model has tanh's."""
    return Fused(TargetOp("Gelu", MS_DOMAIN), [site.value("x")])


def test_a_fusion_the_check_rejects_is_left_and_the_rest_is_written(tmp_path, monkeypatch, capsys):
    source, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(gm.fast_gelu_torchscript(bias=False), source)
    monkeypatch.setattr(FuseFastGelu, "fuse", _exact_gelu_for_tanh)
    code = main(["fold", str(source), "--rules", "transformers", "--check", "-o", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and out.exists()
    assert "folding again without fuse-fast-gelu" in printed
    assert "fast-gelu: 1 site left unfused: with them fused, FAIL" in printed
    assert [n.op_type for n in onnx.load(out).graph.node if n.op_type == "Gelu"] == []


def test_with_that_fusion_alone_asked_for_the_model_is_written_as_it_was_with_the_reason(tmp_path, monkeypatch,
                                                                                        capsys):
    source, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(gm.fast_gelu_torchscript(bias=False), source)
    monkeypatch.setattr(FuseFastGelu, "fuse", _exact_gelu_for_tanh)
    code = main(["fold", str(source), "--rules", "fuse-fast-gelu", "--check", "-o", str(out)])
    assert code == 0 and "fast-gelu: 1 site left unfused" in capsys.readouterr().out
    assert [n.op_type for n in onnx.load(out).graph.node] == [n.op_type for n in onnx.load(source).graph.node]
