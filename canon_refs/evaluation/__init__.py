"""Canon area: evaluation."""
