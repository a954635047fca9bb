"""Canon area: multimodal."""
