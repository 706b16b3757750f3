"""GraphLens core."""
