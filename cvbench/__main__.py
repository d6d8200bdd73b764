"""`python -m cvbench` runs the `cvbench` command."""

from cvbench.cli import run

run()
