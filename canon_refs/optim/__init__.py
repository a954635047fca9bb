"""Canon area: optim."""
