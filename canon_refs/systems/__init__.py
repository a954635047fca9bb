"""Canon area: systems."""
