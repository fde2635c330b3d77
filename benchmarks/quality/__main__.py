"""``python -m benchmarks.quality``: see benchmarks/quality/cli.py."""

import sys

from benchmarks.quality.cli import main

sys.exit(main())
