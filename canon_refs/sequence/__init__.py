"""Canon area: sequence."""
