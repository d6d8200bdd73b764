"""`python -m cvbench` runs the `cvbench` command."""

import sys

from cvbench.cli import main

sys.exit(main())
