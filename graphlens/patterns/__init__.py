"""GraphLens patterns."""
