"""Canon area: vision."""
