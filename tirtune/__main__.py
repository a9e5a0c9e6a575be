"""`python -m tirtune` is the `tirtune` command."""

from __future__ import annotations

import sys

from tirtune.cli import main

sys.exit(main())
