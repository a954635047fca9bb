"""Canon area: finetune."""
