"""`python -m app.cli`: the `agent-runtime` command run as a module (how `serve` starts children)."""

import sys

from app.cli import main

sys.exit(main())
