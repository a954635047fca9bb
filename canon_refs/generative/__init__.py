"""Canon area: generative."""
