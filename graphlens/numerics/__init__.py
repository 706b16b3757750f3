"""GraphLens numerics."""
