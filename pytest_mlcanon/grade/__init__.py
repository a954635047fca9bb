"""``mlcanon grade``: grade a class of untrusted submissions safely, in parallel, into a gradebook.

How a batch flows (``batch`` drives it; each step is one module):

* ``discover`` finds one submission per student folder; ``shard`` keeps this CI job's share of the
  class and merges the shards' gradebooks afterwards; ``config`` is the teacher's configuration.
* ``scan`` is the static integrity scan of each student's files, done by the parent before anything
  runs; ``integrity`` is the table of integrity codes every part shares.
* ``verifier`` is the one process that holds answers, and runs no learner code: it runs the items'
  reference tests once (the calibration), and ``recheck`` records their calls and builds this run's
  re-check cases (fresh inputs, the reference's answers); the parent keeps them in memory.
  ``verification`` is the table, per item, of how its correctness is verified.
* ``zygote`` is a warm process that imports torch and pytest once and compiles the items' tests, but
  never imports a reference, then forks one child per (student, item) job.
* In the child, ``child`` confines itself (``sandbox``: namespaces, a read-only file system, the
  item's reference hidden, limits, a non-root user), installs ``guard`` (an audit hook and a tamper
  check) and runs the item's reference tests with ``stream`` reporting each test on the ``channel``;
  when the session starts, ``replay`` answers the re-check cases on the very modules the tests use,
  ``forbidden`` watching what they run, ``values`` encoding the answers.
* In the parent, ``runner`` enforces the wall-clock, per-test and memory limits and the channel's
  protocol by killing, and ``uids`` gives every job a user of its own and sweeps whatever a job leaves
  behind.
* ``assess`` turns what the child said into a grade the parent can stand behind: the rubric is
  recomputed from the files, every expected test must have reported, and correctness needs the
  parent's own comparison (``compare``) of the learner's answers with the verifier's, or it is
  ``unverified`` and the teacher's policy decides what it earns.
* ``gradebook`` holds the result; ``render`` writes CSV, Markdown, JSON, per-student feedback,
  Gradescope ``results.json``, HTML and the GitHub step summary; ``progress`` shows a bar.

The grading parent never imports torch: only the verifier, the zygote and its children do.
"""
