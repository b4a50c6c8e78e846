"""`python -m tinydl.cli`: the same as the `tinydl` command."""

import sys

from tinydl.cli import main

sys.exit(main())
