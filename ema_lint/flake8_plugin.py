"""The flake8 front end: the same engine and findings, in flake8's tuple contract.

flake8 wants ``(line, column, "CODE message", type)`` with a 0-based column (it adds one
when printing), so the column here is ema-lint's 1-based column minus one. The engine
applies ema-lint's own suppression (``# noqa: EMA101`` on the first line of a multi-line
statement, a file-level ``# ema-lint: noqa``), so the plugin reports what the command
reports; flake8's ``--disable-noqa`` turns it off too. flake8 then reads ``# noqa`` on the
reported line itself: it understands codes only (a rule name after ``# noqa:`` reads to it
as a blanket ``# noqa`` hiding every plugin's findings), which is why rule names go in
``# ema-lint: noqa: NAME``, a form flake8 never parses. Selection by flake8's ``--select``
happens after. The plugin reads the same configuration file as the command
(``[tool.ema-lint]`` / ``ema-lint.toml``); its flags (``--<rule-name>-<option>``) and
``--ema-lint-config`` win over it. Files that hold no trigger of the rules they enable cost
a scan of their text and nothing else (no libcst, no rule is imported for them).

flake8 loads every installed plugin in every run, selected or not. So the flags, the
selection test and the pre-filter come from the rule manifest (``ema_lint.manifest``): the
rules and libcst are imported only when a file with a trigger is to be checked, or, when
EMA codes are selected and flake8 forks workers, once in the main process before it forks
(each worker would otherwise import them again: 0.35 s of CPU per worker).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from . import registry
from ._version import __version__
from .analysis.project.admission import project_admits
from .config import ConfigError, Overrides, Settings
from .options import OptionError
from .prefilter import PreFilter, for_rules

if TYPE_CHECKING:
    from .file_settings import FileSettings


def _flag(rule_name: str, option: str) -> str:
    return f"--{rule_name}-{option.replace('_', '-')}"


def _dest(rule_name: str, option: str) -> str:
    return f"ema_lint__{rule_name}__{option}".replace("-", "_")


class EmaLintChecker:
    name = "ema-lint"
    version = __version__

    _settings: ClassVar[Settings | None] = None
    # False when flake8's selection (--select, --ignore, ...) reports no EMA code: then
    # the plugin, which flake8 runs on every file anyway, has nothing to do.
    _selected: ClassVar[bool] = True

    def __init__(self, tree: ast.AST, filename: str, lines: list[str]) -> None:
        # ``tree`` is requested only so flake8 runs this plugin once per file; libcst
        # parses the text itself.
        self.filename = filename
        self.lines = lines

    @classmethod
    def add_options(cls, parser: Any) -> None:
        parser.add_option(
            "--ema-lint-config",
            default=None,
            parse_from_config=True,
            help="ema-lint configuration file to use (default: the nearest one)",
        )
        for rule in registry.infos():
            for option in rule.options:
                parser.add_option(
                    _flag(rule.name, option.name),
                    dest=_dest(rule.name, option.name),
                    default=None,
                    parse_from_config=True,
                    comma_separated_list=option.type is list,
                    help=f"ema-lint {rule.code}: {option.description} (default: {option.default})",
                )

    @classmethod
    def parse_options(cls, options: Any) -> None:
        cls._selected = _any_code_selected(options)
        if cls._selected:
            # Built once here, before flake8 forks its workers.
            registry.default_prefilter().prepare()
        rule_options: dict[str, dict[str, Any]] = {}
        for rule in registry.infos():
            for option in rule.options:
                value = getattr(options, _dest(rule.name, option.name), None)
                if value is None or value == []:
                    continue
                try:
                    rule_options.setdefault(rule.name, {})[option.name] = option.parse(value)
                except OptionError as error:
                    _usage_error(f"{_flag(rule.name, option.name)}: {error}")
        config = getattr(options, "ema_lint_config", None)
        noqa = not getattr(options, "disable_noqa", False)
        overrides = Overrides(rule_options=rule_options, noqa=noqa)
        try:
            cls._settings = Settings(overrides, config_path=Path(config) if config else None)
        except ConfigError as error:
            _usage_error(str(error))
        # The configuration of the folder flake8 runs in, now: its errors stop the run
        # before any file is checked (with the defaults, it would report what it turns off).
        cls._settings.check_config([Path.cwd()])
        if cls._settings.errors:
            _usage_error(cls._settings.errors[0])
        if cls._selected:  # the filter of the rules enabled here, before the fork too
            _prefilter(cls._settings.for_file(Path.cwd(), is_dir=True))
            if _forks_workers(options):
                # Imported once here, not once in each worker: the workers flake8 forks
                # share it (a run where no file has a trigger pays it once, in vain).
                _engine()

    @classmethod
    def _get_settings(cls) -> Settings:
        if cls._settings is None:
            cls._settings = Settings(Overrides())
        return cls._settings

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        # flake8 runs every installed plugin on every file, selected or not: when no EMA
        # code can be reported this costs nothing, and a file that names nothing any rule
        # looks for costs one scan of its text.
        if not self._selected:
            return
        source = "".join(self.lines)
        # Two scans of the text at most, both compiled once per process: the union of every
        # rule's triggers (no configuration needed), then the triggers of the rules this
        # file enables, the engine's own test. A file that either rejects costs no import of
        # libcst or of the rules.
        imports: bool | None = None
        if not registry.default_prefilter().matches(source):
            imports = project_admits(self.filename, source)
            if not imports:
                return
        settings = self._get_settings()
        path = Path(self.filename) if self.filename not in ("stdin", "-") else None
        file_settings = settings.for_file(path)
        if settings.errors:  # a configuration file below the folder flake8 runs in
            raise _stop(settings.errors[0])
        if file_settings.prefilter and not _prefilter(file_settings).matches(source):
            if imports is None:
                imports = project_admits(self.filename, source)
            if not imports:
                return
        engine = _engine()
        for d in engine.lint(source, self.filename, file_settings):
            yield d.line, d.column - 1, f"{d.code} {d.message}", type(self)


try:  # flake8 prints its ExecutionError in one message, without a traceback
    from flake8.exceptions import ExecutionError as _Stop
except ImportError:  # pragma: no cover - imported without flake8
    _Stop = Exception  # type: ignore[assignment,misc]


class ConfigurationError(_Stop, ValueError):  # type: ignore[misc,valid-type]
    """A configuration error met while checking a file (in a worker): it stops the run."""


def _stop(message: str) -> ConfigurationError:
    return ConfigurationError(f"ema-lint: {message}")


def _usage_error(message: str) -> NoReturn:
    """A bad option or configuration: one line, as flake8 reports its own, and exit 2."""
    import sys

    sys.stderr.write(f"flake8: error: ema-lint: {message}\n")
    raise SystemExit(2)


def _prefilter(file_settings: FileSettings) -> PreFilter:
    """The pre-filter of the rules a file enables (from the manifest: imports no rule),
    the very one the engine applies to the file."""
    return for_rules(file_settings.filter_rules()).prepare()


def _engine() -> Any:
    """The engine and every rule, imported on the first file with a trigger. The imported
    objects then live as long as the process: ``gc.freeze()`` keeps the collector, which
    the parse of each file sets off many times, from walking them again and again."""
    import sys

    if "ema_lint.engine" not in sys.modules:
        import gc

        from . import engine, registry  # noqa: F401  (imported for sys.modules)

        registry.all_rules()
        gc.freeze()
    return sys.modules["ema_lint.engine"]


def _forks_workers(options: Any) -> bool:
    """Will flake8 check files in forked worker processes? (More than one job, and more
    than one file or a folder; not standard input.) Unsure: no."""
    import os

    jobs = getattr(options, "jobs", None)
    try:
        count = (os.cpu_count() or 1) if jobs.is_auto else int(jobs.n_jobs)  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError):
        return False
    names = list(getattr(options, "filenames", None) or ["."])
    if count < 2 or "-" in names:
        return False
    return len(names) > 1 or os.path.isdir(names[0])


def _any_code_selected(options: Any) -> bool:
    """Would flake8, with these options, report any EMA code? (Unsure: yes.)"""
    try:
        from flake8.style_guide import Decision, DecisionEngine

        decide = DecisionEngine(options)
        return any(decide.decision_for(rule.code) is Decision.Selected for rule in registry.infos())
    except Exception:  # another flake8 version, options built by hand: stay on
        return True
