"""The training loop: where the optimizer steps, the accumulation guards, validation,
modes, swaps and the SWA schedule.

Uses the syntax and objects layers.
"""
