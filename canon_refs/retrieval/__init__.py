"""Canon area: retrieval."""
