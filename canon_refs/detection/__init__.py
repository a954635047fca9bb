"""Canon area: detection."""
