"""One module per rule; ``ema_lint.registry`` imports them all."""
