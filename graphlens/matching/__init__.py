"""GraphLens matching."""
