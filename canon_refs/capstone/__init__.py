"""Canon area: capstone."""
