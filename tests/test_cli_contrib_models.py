"""Models written with onnxruntime's contrib ops, as onnxruntime-genai's builder writes them, go through every
command: a value_info that contradicts inference is a warning, the KV cache's head size and the mask's length are
derived from the graph, and --check runs them."""

from __future__ import annotations

import onnx

from graphlens.numerics.dims import dynamic_dims
from graphlens.numerics.weight_dims import weight_fixed_dims
from tests.cli_process import run_graphlens
from tests.numerics.genai_models import HEAD, genai_decoder


def test_the_cache_head_size_and_the_mask_length_come_from_the_graph():
    model = genai_decoder()
    assert weight_fixed_dims(model) == {"kv_cache_dim": HEAD}
    by_label = {d.label: d for d in dynamic_dims(model)}
    assert by_label["total_sequence_length"].expression is not None and by_label["past_sequence_length"].past


def test_fold_with_check_runs_a_genai_decoder_and_writes_a_valid_model(tmp_path):
    source, out = tmp_path / "model.onnx", tmp_path / "folded.onnx"
    onnx.save(genai_decoder(), source)
    done = run_graphlens("fold", str(source), "--rules", "transformers", "--check", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "its value_info contradicts shape inference" in done.stderr and "PASS" in done.stdout
    [already] = [line for line in done.stdout.splitlines() if line.startswith("Fused by the exporter already: ")]
    assert "attention ×1" in already and "RMS norm ×1" in already and "No attention" not in done.stdout
    assert out.exists()
    for command in (["info", str(out)], ["compare", str(source), str(out)]):
        done = run_graphlens(*command)
        assert done.returncode == 0, done.stderr
