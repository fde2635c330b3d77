"""The rule manifest: what the cheap paths need to know about every rule, without its code.

Selecting rules, validating configuration and options, the pre-filter, the cache key and the
flake8 plugin's flags only need each rule's metadata: its code, name, options and trigger
tokens. Importing the rules for that would import libcst and every analysis module (half a
second) in runs where every file is settled by the pre-filter or the cache. So the metadata
is generated into ``ema_lint/_manifest.py``, checked in, and a test asserts it equals what
the rule classes say. After adding or changing a rule (its options, triggers, code, name,
default or fix), regenerate it::

    python -m ema_lint.manifest

(``python -m ema_lint.docs`` regenerates it too.) ``--check`` exits 1 when it is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .options import Option
from .prefilter import Component, Identifier, Names
from .rule_info import RuleInfo

if TYPE_CHECKING:
    pass

MANIFEST_PATH = Path(__file__).with_name("_manifest.py")
REGENERATE = "python -m ema_lint.manifest"


def live() -> tuple[RuleInfo, ...]:
    """The entries of the registered rule classes (imports every rule)."""
    from .registry import all_rules

    return tuple(RuleInfo.of(rule) for rule in all_rules())


def load() -> tuple[RuleInfo, ...]:
    """The checked-in entries (imports no rule)."""
    from ._manifest import RULES

    return RULES


# Writing the module --------------------------------------------------------------------------
def _q(value: object) -> str:
    """``repr`` with double quotes where that needs no escape, as the formatter writes it."""
    if isinstance(value, list):
        return "[" + ", ".join(_q(item) for item in value) + "]"
    text = repr(value)
    prefix = "b" if text.startswith("b") else ""
    body = text[len(prefix) :]
    if body.startswith("'") and '"' not in body[1:-1]:
        return prefix + '"' + body[1:-1].replace("\\'", "'") + '"'
    return text


def _trigger(trigger: bytes) -> str:
    if isinstance(trigger, Identifier):
        return f"identifier({_q(trigger.decode())})"
    if isinstance(trigger, Component):
        return f"component({_q(trigger.decode())})"
    if isinstance(trigger, Names):  # its test and words load from its module when used
        return f"Names({_q(bytes(trigger))})"
    return _q(bytes(trigger))


def _tuple(items: list[str], indent: str) -> str:
    """A tuple literal, one item per line (a trailing comma keeps the formatter off it)."""
    if not items:
        return "()"
    if len(items) == 1 and "\n" not in items[0]:
        return f"({items[0]},)"
    inner = indent + "    "
    return "(\n" + "".join(f"{inner}{item},\n" for item in items) + f"{indent})"


def _option(option: Option, indent: str) -> str:
    inner = indent + "    "
    return (
        "Option(\n"
        f"{inner}name={_q(option.name)},\n"
        f"{inner}type={option.type.__name__},\n"
        f"{inner}default={_q(option.default)},\n"
        f"{inner}description={_q(option.description)},\n"
        + "".join(
            f"{inner}{field}={_q(getattr(option, field))},\n"
            for field in ("minimum", "maximum", "below")
            if getattr(option, field) is not None
        )
        + f"{indent})"
    )


def _entry(info: RuleInfo) -> str:
    indent = "        "
    lines = [
        f"code={_q(info.code)}",
        f"name={_q(info.name)}",
        f"class_name={_q(info.class_name)}",
        f"summary={_q(info.summary)}",
        f"default_enabled={info.default_enabled!r}",
        f"internal={info.internal!r}",
        f"fix_availability={_q(info.fix_availability)}",
        f"fix_applicability={_q(info.fix_applicability)}",
        "options=" + _tuple([_option(o, indent + "    ") for o in info.options], indent),
        "triggers=" + _tuple([_trigger(t) for t in info.triggers], indent),
        "trigger_groups="
        + _tuple(
            [
                _tuple(
                    [
                        _tuple([_trigger(t) for t in alternatives], indent + "        ")
                        for alternatives in group
                    ],
                    indent + "    ",
                )
                for group in info.trigger_groups
            ],
            indent,
        ),
    ]
    return "    RuleInfo(\n" + "".join(f"{indent}{line},\n" for line in lines) + "    )"


def render(entries: tuple[RuleInfo, ...]) -> str:
    """The text of ``_manifest.py`` for these entries."""
    body = "".join(f"{_entry(info)},\n" for info in entries)
    makers = sorted(name for name in ("Names", "component", "identifier") if f"{name}(" in body)
    imports = ["from .rule_info import RuleInfo\n"]
    if "Option(" in body:
        imports.append("from .options import Option\n")
    if makers:
        imports.append(f"from .prefilter import {', '.join(makers)}\n")
    return (
        f'"""Generated by `{REGENERATE}` from the rule classes: do not edit by hand."""\n'
        "\n" + "".join(sorted(imports)) + "\n"
        f"RULES = (\n{body})\n"
    )


def write(path: Path = MANIFEST_PATH) -> bool:
    """Regenerate the manifest from the rule classes; True if the file changed."""
    text = render(live())
    old = path.read_text(encoding="utf-8") if path.exists() else None
    if old == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ema_lint.manifest", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the manifest is stale")
    args = parser.parse_args(argv)
    if args.check:
        if render(load()) != render(live()):
            sys.stderr.write(f"ema_lint/_manifest.py is stale: run `{REGENERATE}`\n")
            return 1
        return 0
    changed = write()
    sys.stdout.write(f"{MANIFEST_PATH.name}: {'updated' if changed else 'up to date'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
