"""A rule's documentation as Markdown: its page, its fix summary and its examples.

Used by ``ema-lint explain`` and ``ema-lint rules``, the SARIF report's rule help and the
docs generator (``ema_lint.docs``). It imports neither the command line nor the reporters,
so that none of them forms an import cycle through the generator.
"""

from __future__ import annotations

import re

from .diagnostics import FixAvailability
from .rule import Rule

_FENCE = re.compile(r"```python\n(.*?)```", re.DOTALL)


def fix_summary(rule: type[Rule]) -> str:
    if rule.fix_availability is FixAvailability.NONE or rule.fix_applicability is None:
        return "none"
    return f"{rule.fix_availability.value}, {rule.fix_applicability.value}"


def _options_table(rule: type[Rule]) -> str:
    if not rule.options:
        return ""
    rows = [
        "## Options",
        "",
        f"Set in `[tool.ema-lint.{rule.name}]` (pyproject.toml) or `[{rule.name}]` "
        f"(ema-lint.toml), or with `--option {rule.name}.NAME=VALUE`.",
        "",
        "| option | type | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for option in rule.options:
        default = option.default
        if isinstance(default, bool):
            default = str(default).lower()
        rows.append(
            f"| `{option.name}` | {option.type.__name__} | `{default}` | {option.description} |"
        )
    return "\n".join(rows)


def render(rule: type[Rule]) -> str:
    """The rule's documentation as Markdown."""
    parts = [
        f"# {rule.code}: {rule.name}",
        "",
        f"{rule.summary}.",
        "",
        "| code | name | default | fix |",
        "| --- | --- | --- | --- |",
        f"| `{rule.code}` | `{rule.name}` | {'on' if rule.default_enabled else 'off'} "
        f"| {fix_summary(rule)} |",
        "",
        rule.documentation(),
    ]
    options = _options_table(rule)
    if options:
        parts += ["", options]
    return "\n".join(parts).rstrip() + "\n"


def examples(rule: type[Rule]) -> tuple[str | None, str | None]:
    """The bad (``## Example``) and good (``## Use instead``) code of a rule's docs."""
    doc = rule.documentation()
    bad = good = None
    for heading, body in _sections(doc):
        match = _FENCE.search(body)
        if match is None:
            continue
        if heading == "Example":
            bad = match.group(1)
        elif heading == "Use instead":
            good = match.group(1)
    return bad, good


def shape_examples(rule: type[Rule]) -> list[tuple[str, str, str]]:
    """The ``## Shapes`` section of a rule's docs: (title, reported code, silent code) for
    each ``### title`` subsection, whose first fence is reported and second is not."""
    found: list[tuple[str, str, str]] = []
    for heading, body in _sections(rule.documentation()):
        if heading != "Shapes":
            continue
        for part in body.split("\n### ")[1:]:
            title, _, text = part.partition("\n")
            fences = _FENCE.findall(text)
            if len(fences) == 2:
                found.append((title.strip(), fences[0], fences[1]))
    return found


def _sections(doc: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    current: str | None = None
    lines: list[str] = []
    for line in doc.splitlines():
        if line.startswith("## "):
            if current is not None:
                found.append((current, "\n".join(lines)))
            current = line[3:].strip()
            lines = []
        else:
            lines.append(line)
    if current is not None:
        found.append((current, "\n".join(lines)))
    return found
