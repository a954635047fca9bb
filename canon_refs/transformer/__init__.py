"""Canon area: transformer."""
