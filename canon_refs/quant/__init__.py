"""Canon area: quant."""
