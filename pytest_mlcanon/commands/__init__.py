"""Subcommands of ``mlcanon``: one module each, exposing ``register(subparsers)``, which adds its
parser and sets ``func`` (called with the parsed namespace and the unparsed extra arguments, and
returning the exit status). ``cli.py`` registers every module listed in ``COMMANDS``, in order."""

COMMANDS = ("list", "lint", "check", "watch", "stubs", "drill", "reset", "plan", "misslog", "hint", "dashboard", "grade", "gradescope_autograder", "cheatsheet", "shapes", "diff", "today", "makefile", "drills", "mock")
