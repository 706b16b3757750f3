"""Compiled variants kept on disk between runs: read back when the pattern and the code are the same, passed
over when unreadable or unwritable, never used for a pattern JSON cannot key."""

from __future__ import annotations

import numpy as np

from graphlens.matching import variant_cache
from graphlens.matching.variants import compile_variants
from graphlens.patterns.ir import ABSENT, Pattern, op, value
from graphlens.patterns.library import get_pattern


def counting():
    calls = []

    def compile_counted(pattern):
        calls.append(pattern.name)
        return compile_variants(pattern)

    return calls, compile_counted


def shape(found):
    return [(v.index, list(v.nodes), v.skipped, sorted(v.outputs)) for v in found]


def test_a_second_run_reads_the_variants_the_first_wrote(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls, compile_counted = counting()
    first = variant_cache.cached_variants(get_pattern("attention"), compile_counted)
    again = variant_cache.cached_variants(get_pattern("attention"), compile_counted)
    assert calls == ["attention"] and len(list((tmp_path / "graphlens" / "variants").iterdir())) == 1
    assert shape(again) == shape(first) == shape(compile_variants(get_pattern("attention")))


def test_an_unreadable_cache_is_expanded_again_and_an_unwritable_one_passed_over(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls, compile_counted = counting()
    variant_cache.cached_variants(get_pattern("conv-bn"), compile_counted)
    [written] = (tmp_path / "graphlens" / "variants").iterdir()
    written.write_bytes(b"not a pickle")
    found = variant_cache.cached_variants(get_pattern("conv-bn"), compile_counted)
    assert calls == ["conv-bn", "conv-bn"] and shape(found) == shape(compile_variants(get_pattern("conv-bn")))
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # a folder cannot be made under a file
    assert shape(variant_cache.cached_variants(get_pattern("conv-bn"), compile_counted)) == shape(found)


def test_a_pattern_with_a_python_predicate_is_never_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls, compile_counted = counting()
    weight = value("w", constant=True, predicate=lambda a: bool(np.all(a > 0)))
    pattern = Pattern("positive-conv", (op("conv", "Conv", value("x"), weight),))
    variant_cache.cached_variants(pattern, compile_counted)
    variant_cache.cached_variants(pattern, compile_counted)
    assert calls == ["positive-conv", "positive-conv"] and not (tmp_path / "graphlens").exists()


def test_read_back_variants_keep_the_absent_marker_attribute_rules_compare_by_identity(tmp_path, monkeypatch):
    """conv-bn's ``training_mode in [0, absent]``: a copy of the marker would make every BatchNormalization fail."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _, compile_counted = counting()
    variant_cache.cached_variants(get_pattern("conv-bn"), compile_counted)
    read_back = variant_cache.cached_variants(get_pattern("conv-bn"), compile_counted)
    values = [v for variant in read_back for node in variant.nodes.values() for rule in node.op.attrs
              for v in rule.values]
    assert any(v is ABSENT for v in values)
