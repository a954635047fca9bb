"""Canon area: posttrain."""
