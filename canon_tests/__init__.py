"""Reference tests of the coding canon, one file per row of the canon table (docs/contract.md index)."""
