"""Reference implementations of the coding canon, laid out ``<area>/<module>.py`` (docs/contract.md C1).

Modules that build on other items import them absolutely (``canon_refs.<area>.<module>``), so that
the plugin's redirect substitutes a learner's file everywhere it is used.
"""
