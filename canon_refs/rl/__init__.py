"""Canon area: rl."""
