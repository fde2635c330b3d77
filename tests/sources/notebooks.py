"""Notebook documents for the tests, written the way Jupyter writes them."""

from __future__ import annotations

import json
from typing import Any


def code(source: str | list[str], outputs: list | None = None, count: int | None = 1) -> dict:
    return {
        "cell_type": "code",
        "execution_count": count,
        "id": f"c{abs(hash(str(source))) % 10**8}",
        "metadata": {},
        "outputs": outputs or [],
        "source": source,
    }


def markdown(text: str) -> dict:
    return {"cell_type": "markdown", "id": "md", "metadata": {}, "source": [text]}


def notebook(*cells: dict, language: str = "python") -> dict[str, Any]:
    return {
        "cells": list(cells),
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": language, "name": "python3"},
            "language_info": {"name": language, "version": "3.11.7"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def lines(text: str) -> list[str]:
    """A cell source as nbformat stores it: a list of lines."""
    return text.splitlines(True)


def dumps(document: dict, **style: Any) -> str:
    """As Jupyter (nbformat) writes a notebook, unless ``style`` says otherwise."""
    options = {"indent": 1, "sort_keys": True, "ensure_ascii": False}
    options.update(style)
    return json.dumps(document, **options) + "\n"


OUTPUT = {
    "name": "stdout",
    "output_type": "stream",
    "text": ["epoch 1: loss 0.42\n", "épreuve ✓\n"],
}

# A training notebook with the EMA bug in its third cell (the second code cell's import
# comes from the first cell).
TRAINING = notebook(
    markdown("# Train a classifier with an EMA\n"),
    code(lines("%matplotlib inline\nimport torch\nfrom timm.utils import ModelEmaV2\n")),
    code(
        lines(
            "model = torch.nn.Linear(4, 2)\n"
            "!nvidia-smi\n"
            "# keep an average of the weights\n"
            "ema = ModelEmaV2(model, decay=0.99)\n"
            "print(ema)"
        ),
        outputs=[OUTPUT],
        count=2,
    ),
    code(
        lines("for batch in loader:\n    train_step(model, batch)\n    ema.update(model)\n"),
        count=3,
    ),
)
