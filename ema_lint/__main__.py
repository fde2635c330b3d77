"""``python -m ema_lint``."""

from .cli import main

raise SystemExit(main())
