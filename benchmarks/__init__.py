"""Benchmark helpers (synthetic model generators) for GraphLens."""
