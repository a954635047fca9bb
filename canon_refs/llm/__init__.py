"""Canon area: llm."""
