"""Rule options: their declaration and the validation of values from files and flags.

Apart from ``ema_lint.rule`` (which imports libcst) so that configuration files, command-line
options and the flake8 plugin can validate option values from the rule manifest alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class OptionError(ValueError):
    """A rule option with a value of the wrong type or out of its domain."""


@dataclass(frozen=True)
class Option:
    """A setting of one rule, from ``[tool.ema-lint.<rule-name>]`` or a flake8 flag."""

    name: str
    type: type  # float, int, bool, str or list (of str)
    default: Any
    description: str
    minimum: float | None = None  # numbers: the lowest value accepted (inclusive)
    maximum: float | None = None  # numbers: the highest value accepted (inclusive)
    below: str | None = None  # another option of the rule this one must stay under

    def parse(self, value: Any) -> Any:
        """Validate a value from TOML (typed) or from the command line (a string): its type,
        and for numbers that it is finite and within ``minimum``..``maximum``."""
        value = self._typed(value)
        if self.type in (int, float):
            self._check_range(value)
        return value

    def _check_range(self, value: float) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise OptionError(f"expected a finite number, got {value!r}")
        low, high = self.minimum, self.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            if low is not None and high is not None:
                expected = f"from {low:g} to {high:g}"
            else:
                expected = f"at least {low:g}" if low is not None else f"at most {high:g}"
            raise OptionError(f"expected a value {expected}, got {value!r}")

    def _typed(self, value: Any) -> Any:
        kind = self.type
        if isinstance(value, str) and kind is not str:
            value = self._from_text(value)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if kind is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise OptionError(f"expected a list of strings, got {value!r}")
            return list(value)
        if kind in (int, float) and isinstance(value, bool):
            raise OptionError(f"expected a {kind.__name__}, got {value!r}")
        if not isinstance(value, kind):
            raise OptionError(f"expected a {kind.__name__}, got {value!r}")
        return value

    def _from_text(self, text: str) -> Any:
        kind = self.type
        try:
            if kind is bool:
                lowered = text.strip().lower()
                if lowered in ("1", "true", "yes", "on"):
                    return True
                if lowered in ("0", "false", "no", "off"):
                    return False
                raise ValueError(text)
            if kind is list:
                return [part.strip() for part in text.split(",") if part.strip()]
            return kind(text)
        except (ValueError, OverflowError):
            raise OptionError(f"expected a {kind.__name__}, got {text!r}") from None


class HasOptions(Protocol):
    """A rule class, or its entry in the manifest: what option validation needs."""

    name: str
    options: tuple[Option, ...]


def rule_options_from(rule: HasOptions, values: Mapping[str, Any]) -> dict[str, Any]:
    """Validated options for ``rule``; raises OptionError naming the bad key."""
    parsed: dict[str, Any] = {}
    names = {o.name: o for o in rule.options}
    for key, value in values.items():
        option = names.get(key)
        if option is None:
            known = ", ".join(sorted(names)) or "none"
            raise OptionError(f"unknown option {key!r} for {rule.name} (known: {known})")
        try:
            parsed[key] = option.parse(value)
        except OptionError as error:
            raise OptionError(f"{rule.name}.{key}: {error}") from None
    return parsed


def check_order(rule: HasOptions, values: Mapping[str, Any]) -> None:
    """Raise OptionError when an option is not below the one it must stay under (``below``),
    with the defaults for what ``values`` leaves out: a range whose minimum is not below its
    maximum accepts nothing."""
    given = {o.name: values.get(o.name, o.default) for o in rule.options}
    for option in rule.options:
        if option.below is None or option.below not in given:
            continue
        low, high = given[option.name], given[option.below]
        if not low < high:
            raise OptionError(
                f"{rule.name}.{option.name} ({low!r}) must be below "
                f"{rule.name}.{option.below} ({high!r})"
            )
