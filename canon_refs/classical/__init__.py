"""Canon area: classical."""
