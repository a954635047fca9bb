"""pytest plugin entry point (placeholder while the foundation is built)."""
