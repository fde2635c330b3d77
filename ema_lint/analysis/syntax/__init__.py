"""Syntax facts: the module index, imports and names, static values, origins of expressions.

The bottom layer: it knows Python, not training. Nothing here imports another layer.
"""
