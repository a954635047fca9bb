"""``mlcanon dashboard``: the learner's progress as one self-contained HTML page.

:mod:`.model` reads the drill state into typed rows, :mod:`.svg` draws the charts, :mod:`.page`
lays out the page.
"""
