"""Canon area: nn."""
