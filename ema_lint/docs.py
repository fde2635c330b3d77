"""Documentation generated from the code: rule pages, the rules index, the configuration
reference, the README's rule table and the docs site's navigation.

``ema-lint explain`` prints a rule's page; ``python -m ema_lint.docs`` writes
``docs/rules/<CODE>.md`` (from each rule's docstring and metadata), ``docs/rules.md``,
``docs/configuration.md`` (from the configuration keys, the rules' ``Option``s and the
command line's arguments), the README's table and the rules section of ``mkdocs.yml``;
tests fail when any of them is stale.
"""

from __future__ import annotations

import argparse
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
            + _relink(_demote(evidence.read_text(encoding="utf-8")), f"../evidence/{rule.code}/")
        )
    return text


_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)")


def _relink(markdown: str, base: str) -> str:
    """Relative links of an included page, made relative to the page that includes it."""

    def fix(match: re.Match[str]) -> str:
        target = match.group(2)
        if re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target, re.IGNORECASE):
            return match.group(0)
        return match.group(1) + base + target

    return _LINK.sub(fix, markdown)


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


# The docs site --------------------------------------------------------------------------
def rules_index() -> str:
    """docs/rules.md: every rule, linked to its page."""
    rows = [
        "# Rules",
        "",
        "<!-- Generated by `python -m ema_lint.docs` from the rule registry: do not edit. -->",
        "",
        "Codes: `EMA1xx` averaging values, `EMA2xx` the training loop, `EMA3xx` hand-written",
        "updates, `EMA4xx` SWA, `EMA9xx` ema-lint's own errors. Every rule has a name too,",
        "accepted wherever a code is (`--ignore ema-decay-out-of-range`). The fix column says",
        "whether `--fix` can repair a finding and whether that fix is safe (applied by `--fix`)",
        "or unsafe (applied only with `--unsafe-fixes`).",
        "",
        "| code | name | what it finds | fix | default |",
        "| --- | --- | --- | --- | --- |",
    ]
    for rule in registry.all_rules():
        rows.append(
            f"| [{rule.code}](rules/{rule.code}.md) | `{rule.name}` | {rule.summary} "
            f"| {fix_summary(rule)} | {'on' if rule.default_enabled else 'off'} |"
        )
    return "\n".join(rows) + "\n"


# Descriptions of the configuration keys; a test keeps them in step with config.py.
SETTINGS: dict[str, tuple[str, str, str]] = {
    "select": (
        "list of rules",
        "every rule that is on by default",
        "Rules to run: codes (`EMA101`), prefixes (`EMA1`, `EMA`, `ALL`) or names. Replaces "
        "what came before it (the defaults, or the configuration file for a command-line "
        "`--select`).",
    ),
    "extend-select": ("list of rules", "`[]`", "Rules to run in addition to `select`."),
    "ignore": (
        "list of rules",
        "`[]`",
        "Rules not to run. `EMA9xx` errors of ema-lint itself are reported whatever `select` "
        "says, unless ignored here.",
    ),
    "per-file-ignores": (
        "table: pattern = list of rules",
        "`{}`",
        'Rules not to run on the files matching a pattern (`"tests/*" = ["EMA1"]`); '
        "patterns without a `/` match file names, others paths relative to the configuration "
        "file's folder.",
    ),
    "exclude": (
        "list of patterns",
        "the defaults below",
        "Files and folders not to check when walking a directory; replaces the defaults. "
        "Patterns follow `.gitignore` syntax, relative to the configuration file's folder: a "
        "bare name (`outputs`) matches at any depth, `/outputs` or `./outputs` only there, "
        "`**/outputs/**` a top-level folder too, `!pattern` keeps a file again. Paths named "
        "on the command line are checked anyway, unless `--force-exclude`.",
    ),
    "extend-exclude": ("list of patterns", "`[]`", "Patterns excluded in addition to `exclude`."),
    "respect-gitignore": (
        "boolean",
        "`true`",
        "Skip, when walking a directory, what git ignores: `.gitignore` files, "
        "`.git/info/exclude` and the global excludes file (`core.excludesFile`), as ruff does. "
        "`--no-respect-gitignore` turns it off for one run.",
    ),
    "unsafe-fixes": (
        "boolean",
        "`false`",
        "Apply unsafe fixes with `--fix` (and show them in `--diff`), as `--unsafe-fixes` does.",
    ),
}


def _cli_rows() -> list[str]:
    from .cli import build_parser

    parser = build_parser()
    check = parser._subparsers._group_actions[0].choices["check"]  # type: ignore[union-attr]
    rows: list[str] = []
    for group in check._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.option_strings and a.help != argparse.SUPPRESS and a.dest != "help"
        ]
        if not actions:
            continue
        rows += ["", f"### {group.title.capitalize()}", "", "| flag | meaning |", "| --- | --- |"]
        for action in actions:
            flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
            if action.nargs != 0:
                metavar = action.metavar or (
                    "{" + ",".join(action.choices) + "}" if action.choices else action.dest.upper()
                )
                flags += f" `{metavar}`"
            rows.append(f"| {flags} | {action.help or ''} |")
    return rows


def configuration_reference() -> str:
    """docs/configuration.md, generated from the configuration keys, options and flags."""
    from .config import CONFIG_NAMES, DEFAULT_EXCLUDES

    rows = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m ema_lint.docs` from config.py, the rules' options and "
        "the command line: do not edit. -->",
        "",
        "ema-lint reads `[tool.ema-lint]` in `pyproject.toml`, or the same keys without the "
        "prefix in `ema-lint.toml` or `.ema-lint.toml`. Each file is governed by the nearest "
        "configuration file above it (looked up in the order "
        f"{', '.join(f'`{n}`' for n in CONFIG_NAMES)} in each folder); "
        "`--config PATH` uses one file for every path and `--isolated` ignores them all. "
        "Command-line flags win over files. An unknown key or a value of the wrong type is an "
        "error that names the key and the file.",
        "",
        "```toml",
        "[tool.ema-lint]",
        'select = ["EMA"]',
        'ignore = ["EMA104"]',
        'extend-exclude = ["third_party"]',
        "",
        "[tool.ema-lint.per-file-ignores]",
        '"tests/*" = ["EMA1"]',
        "",
        "[tool.ema-lint.ema-decay-out-of-range]   # a rule's options, by name or code",
        "min = 0.999",
        "```",
        "",
        "## Settings",
        "",
        "| key | type | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for key, (kind, default, meaning) in SETTINGS.items():
        rows.append(f"| `{key}` | {kind} | {default} | {meaning} |")
    rows += [
        "",
        "Excluded by default: " + ", ".join(f"`{p}`" for p in DEFAULT_EXCLUDES) + ".",
        "",
        "## Rule options",
        "",
        "Each rule's options sit in a table named after the rule (`[tool.ema-lint.RULE]`, by name "
        "or code), or are set on the command line with `--option RULE.OPTION=VALUE`.",
    ]
    for rule in registry.all_rules():
        if not rule.options:
            continue
        rows += [
            "",
            f"### [{rule.code}](rules/{rule.code}.md) `{rule.name}`",
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
    rows += [
        "",
        "## Command line",
        "",
        "`ema-lint [check] [PATHS]` (the default command; `ema-lint rules` lists the rules and "
        "`ema-lint explain RULE` prints a rule's page). The environment variable "
        "`EMA_LINT_OUTPUT_FORMAT` sets the default output format; `NO_COLOR` and `FORCE_COLOR` "
        "are honoured.",
        *_cli_rows(),
    ]
    return "\n".join(rows) + "\n"


MKDOCS_START = "# rules-nav:start"
MKDOCS_END = "# rules-nav:end"


def mkdocs_with_rules(text: str) -> str:
    """mkdocs.yml with the navigation entries of the rule pages regenerated."""
    start = text.index(MKDOCS_START)
    line_start = text.rfind("\n", 0, start) + 1
    indent = text[line_start:start]
    end = text.index(MKDOCS_END)
    entries = "".join(
        f"{indent}- {rule.code} {rule.name}: rules/{rule.code}.md\n"
        for rule in registry.all_rules()
    )
    return text[: start + len(MKDOCS_START)] + "\n" + entries + indent + text[end:]


def generated_files(root: Path) -> dict[Path, str]:
    """Every generated file besides the rule pages, with its expected content."""
    files = {
        root / "docs" / "rules.md": rules_index(),
        root / "docs" / "configuration.md": configuration_reference(),
    }
    readme = root / "README.md"
    if readme.is_file():
        files[readme] = readme_with_table(readme.read_text(encoding="utf-8"))
    mkdocs = root / "mkdocs.yml"
    if mkdocs.is_file():
        files[mkdocs] = mkdocs_with_rules(mkdocs.read_text(encoding="utf-8"))
    return files


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    for path in write_pages(root):
        print(f"wrote {path}")
    for path, text in generated_files(root).items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    from . import manifest  # the rule metadata the cheap paths read, regenerated alongside

    if manifest.write():
        print(f"wrote {manifest.MANIFEST_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
