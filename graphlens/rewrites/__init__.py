"""GraphLens rewrites."""
