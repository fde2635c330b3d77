"""Rule documentation from one source: the rule's docstring and its metadata.

``ema-lint explain`` prints it, ``docs/rules/<CODE>.md`` is generated from it
(``python -m ema_lint.docs``), and a test keeps the two, the registry and the README's rule
table in agreement.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from . import registry
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


def page(rule: type[Rule], root: Path) -> str:
    """The docs page: the rule's documentation plus its evidence, where an experiment exists."""
    text = render(rule)
    evidence = root / "docs" / "evidence" / rule.code / "results.md"
    if evidence.is_file():
        text += (
            "\n## Evidence\n\n"
            f"A small training run with this bug and with its fix "
            f"(`python docs/evidence/run_all.py --only {rule.code}`):\n\n"
            f"![{rule.code} buggy vs fixed](../evidence/{rule.code}/plot.png)\n\n"
            + _demote(evidence.read_text(encoding="utf-8"))
        )
    return text


def _demote(markdown: str) -> str:
    """Nest an included page's headings under the Evidence section."""
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", markdown, flags=re.MULTILINE)


def rules_table() -> str:
    """The README's table of rules."""
    rows = ["| code | name | what it finds | fix |", "| --- | --- | --- | --- |"]
    for rule in registry.all_rules():
        rows.append(
            f"| [{rule.code}](docs/rules/{rule.code}.md) | `{rule.name}` | {rule.summary} "
            f"| {fix_summary(rule)} |"
        )
    return "\n".join(rows)


def write_pages(root: Path) -> list[Path]:
    """Regenerate docs/rules/*.md; returns the files written."""
    folder = root / "docs" / "rules"
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for rule in registry.all_rules():
        path = folder / f"{rule.code}.md"
        text = page(rule, root)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


README_START = "<!-- rules-table:start -->"
README_END = "<!-- rules-table:end -->"


def readme_with_table(readme: str) -> str:
    """The README with its rules table regenerated between the markers."""
    start = readme.index(README_START) + len(README_START)
    end = readme.index(README_END)
    return readme[:start] + "\n" + rules_table() + "\n" + readme[end:]


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    for path in write_pages(root):
        print(f"wrote {path}")
    readme = root / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8")
        new = readme_with_table(text)
        if new != text:
            readme.write_text(new, encoding="utf-8")
            print(f"wrote {readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
