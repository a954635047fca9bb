"""Reference tests of the coding canon, one file per row of the canon table (canon-spec index)."""
