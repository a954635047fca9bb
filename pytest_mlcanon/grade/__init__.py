"""``mlcanon grade``: grade a class of untrusted submissions safely, in parallel, into a gradebook.

How a batch flows (``batch`` drives it; each step is one module):

* ``discover`` finds one submission per student folder; ``shard`` keeps this CI job's share of the
  class and merges the shards' gradebooks afterwards; ``config`` is the teacher's configuration.
* ``scan`` is the static integrity scan of each student's files, done by the parent before anything
  runs; ``integrity`` is the table of integrity codes every part shares.
* ``zygote`` is a warm process that imports torch and pytest once and runs the items' reference
  tests once (warming every lazy import, and recording the seeded re-check through ``recheck``),
  then forks one child per (student, item) job.
* In the child, ``child`` confines itself (``sandbox``: namespaces, a read-only file system, limits,
  a non-root user), installs ``guard`` (an audit hook and a tamper check), replays the re-check and
  runs the item's reference tests with ``stream`` reporting each test on the ``channel``.
* In the parent, ``runner`` enforces the wall-clock, per-test and memory limits by killing, and
  ``uids`` gives every job a user of its own and kills whatever a job leaves behind.
* ``assess`` turns what the child said into a grade the parent can stand behind: the rubric is
  recomputed from the files, every expected test must have reported, and correctness needs the
  parent's own comparison (``compare``) of the learner's outputs on freshly seeded inputs.
* ``gradebook`` holds the result; ``render`` writes CSV, Markdown, JSON, per-student feedback,
  Gradescope ``results.json``, HTML and the GitHub step summary; ``progress`` shows a bar.

The grading parent never imports torch: only the zygote and its children do.
"""
