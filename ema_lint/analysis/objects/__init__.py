"""Averaging objects and their updates, with the API table as data.

Which names hold averaged weights (library APIs, hand-made copies), how they are
updated, with which decay, on which device and dtype; the optimizers, schedulers and
norm layers they meet. Uses only the syntax layer.
"""
