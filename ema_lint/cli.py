"""The ``ema-lint`` command: ``check`` (the default), ``rules`` and ``explain``.

Exit codes: 0 no finding left, 1 findings left (or, with ``--diff``, a diff to apply),
2 a usage, configuration or internal error (including EMA902/EMA903 and unreadable paths).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from . import registry
from ._version import __version__
from .cache import DIR_NAME, ENV_VAR, Cache, default_dir
from .collector import use_batch_schedule
from .config import ConfigError, Overrides, Settings, parse_rule_option
from .options import OptionError, rule_options_from
from .pool import available_cpus
from .reporters import RunResult, renderers
from .runner import FileOutcome, Mode, collect, process_source, run

# Nothing here imports the rules or libcst: a run whose files are all settled by the
# pre-filter or the cache never needs them (``rules``, ``explain`` and the engine import them).

SUBCOMMANDS = ("check", "rules", "explain", "server", "clean")
INTERNAL_ERRORS = ("EMA902", "EMA903")


class UsageError(Exception):
    pass


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ema-lint",
        description="Find and fix misconfigured weight averaging (EMA, SWA) in training code.",
    )
    parser.add_argument("--version", action="version", version=f"ema-lint {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    check = sub.add_parser("check", help="check files (the default command)")
    check.add_argument("paths", nargs="*", type=Path, help="files or directories ('-' for stdin)")
    fixing = check.add_argument_group("fixing")
    fixing.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    fixing.add_argument(
        "--unsafe-fixes",
        action="store_true",
        default=None,
        help="also apply (or show) unsafe fixes, such as choosing a new decay",
    )
    fixing.add_argument(
        "--no-unsafe-fixes", dest="unsafe_fixes", action="store_false", help=argparse.SUPPRESS
    )
    fixing.add_argument(
        "--diff", action="store_true", help="print the fixes as a unified diff; write nothing"
    )
    fixing.add_argument(
        "--exit-non-zero-on-fix",
        action="store_true",
        help="exit 1 if any file was fixed, even when nothing is left",
    )
    rules = check.add_argument_group("rule selection")
    # Repeated list flags add up, as in ruff: --select EMA1 --select EMA2 selects both.
    rules.add_argument(
        "--select", type=_comma_list, action="extend", help="codes, prefixes or names to enable"
    )
    rules.add_argument(
        "--extend-select", type=_comma_list, action="extend", default=[], help="enable these too"
    )
    rules.add_argument(
        "--ignore", type=_comma_list, action="extend", default=[], help="disable these"
    )
    rules.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="RULE.OPTION=VALUE",
        help="set a rule option, e.g. ema-decay-out-of-range.min=0.99",
    )
    rules.add_argument("--disable-noqa", action="store_true", help="ignore # noqa comments")
    files = check.add_argument_group("files")
    files.add_argument(
        "--exclude",
        type=_comma_list,
        action="extend",
        help="patterns to exclude, gitignore syntax (replaces defaults)",
    )
    files.add_argument(
        "--extend-exclude", type=_comma_list, action="extend", default=[], help="more patterns"
    )
    files.add_argument(
        "--force-exclude",
        action="store_true",
        help="apply excludes to paths named on the command line too (pre-commit)",
    )
    files.add_argument(
        "--respect-gitignore",
        dest="respect_gitignore",
        action="store_true",
        default=None,
        help="skip what git ignores when walking folders (the default)",
    )
    files.add_argument(
        "--no-respect-gitignore",
        dest="respect_gitignore",
        action="store_false",
        help="also walk into what .gitignore, .git/info/exclude and global excludes ignore",
    )
    files.add_argument("--stdin-filename", help="the name of the file read from stdin")
    files.add_argument("--config", type=Path, help="use this configuration file only")
    files.add_argument("--isolated", action="store_true", help="ignore configuration files")
    files.add_argument("--no-prefilter", action="store_true", help=argparse.SUPPRESS)
    speed = check.add_argument_group("speed")
    speed.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=None,
        metavar="N",
        help="processes to check files with (default: the CPUs available)",
    )
    speed.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the results cache"
    )
    speed.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"where to keep the cache (default: ${ENV_VAR}, else {DIR_NAME}/ in the project)",
    )
    output = check.add_argument_group("output")
    output.add_argument(
        "--output-format",
        default=os.environ.get("EMA_LINT_OUTPUT_FORMAT", "text"),
        help="text (default), concise, full, grouped, json, json-lines, sarif, github, "
        "gitlab or junit",
    )
    output.add_argument("--statistics", action="store_true", help="count findings per rule")
    output.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    output.add_argument("-q", "--quiet", action="store_true", help="print findings only")
    output.add_argument("--color", choices=("auto", "always", "never"), default="auto")

    _add_adoption_arguments(check)
    _add_clean_parser(sub)

    rules_cmd = sub.add_parser("rules", help="list the rules")
    rules_cmd.add_argument("--output-format", choices=("text", "json"), default="text")

    explain = sub.add_parser("explain", help="show a rule's documentation")
    explain.add_argument("rule", help="a code (EMA101) or name (ema-decay-out-of-range)")
    _add_server_parser(sub)
    return parser


def _add_server_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser(
        "server",
        help="run the language server for editors (LSP over stdio; needs the server extra)",
        description="Run the language server over stdin/stdout (pip install 'ema-lint[server]').",
    )


def _server(stderr: TextIO) -> int:
    from .server import serve

    return serve(stderr)


def _add_adoption_arguments(check: argparse.ArgumentParser) -> None:
    """Flags for adopting ema-lint on an existing codebase and for feeding other tools."""
    adoption = check.add_argument_group("adoption")
    adoption.add_argument(
        "--add-noqa",
        action="store_true",
        help="add '# noqa: CODE' for every current finding (idempotent, keeps comments)",
    )
    adoption.add_argument(
        "--show-fixes",
        action="store_true",
        help="list the fixes: applied ones with --fix, else those available",
    )
    adoption.add_argument(
        "--show-settings",
        action="store_true",
        help="print the settings that apply to the one file given, and exit",
    )
    adoption.add_argument(
        "-o", "--output-file", type=Path, metavar="PATH", help="write the report to this file"
    )


def _add_clean_parser(sub: argparse._SubParsersAction) -> None:
    clean = sub.add_parser("clean", help="remove the results cache")
    clean.add_argument("--cache-dir", type=Path, default=None, metavar="PATH")


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of processes, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 process, got {value}")
    return value


def _cache(args: argparse.Namespace, settings: Settings) -> Cache | None:
    """The results cache of this run, in the project that holds the current directory."""
    if args.no_cache:
        return None
    if args.cache_dir is not None:
        return Cache(args.cache_dir)
    config = settings.config_for(Path.cwd())
    root = config.path.parent if config.path is not None else Path.cwd()
    return Cache(default_dir(root))


def _normalize_argv(argv: Sequence[str]) -> list[str]:
    """``ema-lint PATH`` means ``ema-lint check PATH``."""
    args = list(argv)
    if args and (args[0] in SUBCOMMANDS or args[0] in ("-h", "--help", "--version")):
        return args
    return ["check", *args]


def _mistyped_command(argv: Sequence[str]) -> None:
    """``ema-lint chek``: a word close to a subcommand that is no path is a usage error,
    not a missing file followed by a run that checked nothing."""
    import difflib

    if not argv or argv[0].startswith("-") or argv[0] in SUBCOMMANDS:
        return
    word = argv[0]
    if os.path.lexists(word) or "/" in word or os.sep in word or "." in word:
        return
    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.6)
    if close:
        raise UsageError(f"unknown command {word!r} (did you mean {close[0]!r}?)")


def _use_color(choice: str, stream: TextIO) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


def _overrides(args: argparse.Namespace) -> Overrides:
    options: dict[str, dict[str, object]] = {}
    for text in args.option:
        rule_name, option, value = parse_rule_option(text)
        rule = registry.info(rule_name)
        assert rule is not None
        try:
            options.setdefault(rule_name, {}).update(rule_options_from(rule, {option: value}))
        except OptionError as error:
            raise ConfigError(f"--option: {error}") from None
    return Overrides(
        select=args.select,
        extend_select=args.extend_select,
        ignore=args.ignore,
        exclude=args.exclude,
        extend_exclude=args.extend_exclude,
        unsafe_fixes=args.unsafe_fixes,
        rule_options=options,
        noqa=not args.disable_noqa,
        prefilter=not args.no_prefilter,
        respect_gitignore=args.respect_gitignore,
    )


def _statistics(result: RunResult, stream: TextIO, output_format: str = "text") -> None:
    """Findings per rule: a table, or with ``--output-format json`` a JSON list as ruff's
    (``code``, ``name``, ``count``, ``fixable``) with the run's errors beside it."""
    counts = Counter(d.code for d in result.diagnostics)
    fixable = {d.code for d in result.diagnostics if result.fixable(d)}
    rows = []
    for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        rule = registry.info(code)
        assert rule is not None
        rows.append({"code": code, "name": rule.name, "count": count, "fixable": code in fixable})
    if output_format in ("json", "json-lines"):
        json.dump({"statistics": rows, "errors": list(result.errors)}, stream, indent=2)
        stream.write("\n")
        return
    for row in rows:
        marker = "[*]" if row["fixable"] else "[ ]"
        stream.write(f"{row['count']:>5}\t{row['code']}\t{marker} {row['name']}\n")
    for error in result.errors:
        stream.write(f"error: {error}\n")


def _exit_code(result: RunResult, args: argparse.Namespace, any_diff: bool) -> int:
    if result.errors or any(d.code in INTERNAL_ERRORS for d in result.diagnostics):
        return 2
    if args.exit_zero:
        return 0
    if args.diff:
        return 1 if any_diff else 0
    if args.exit_non_zero_on_fix and result.fixed:
        return 1
    return 1 if result.diagnostics else 0


def _check(
    args: argparse.Namespace, stdout: TextIO, stderr: TextIO, stdin: io.BufferedIOBase
) -> int:
    formats = renderers()
    if args.output_format not in formats:
        raise UsageError(
            f"unknown output format {args.output_format!r} (choose from {', '.join(formats)})"
        )
    settings = Settings(_overrides(args), config_path=args.config, isolated=args.isolated)
    mode = Mode(fix=args.fix, diff=args.diff, text_edits=args.output_format != "text")
    paths = args.paths or [Path(".")]
    if args.show_settings:
        return _show_settings(paths, settings, stdout)
    if args.output_file is not None:
        return _to_output_file(args, stdout, stderr, stdin)
    color = _use_color(args.color, stdout)
    unsafe = bool(args.unsafe_fixes)

    if any(str(p) == "-" for p in paths):
        if len(paths) > 1:
            raise UsageError("'-' (stdin) cannot be combined with other paths")
        display = args.stdin_filename or "-"
        target = Path(args.stdin_filename) if args.stdin_filename else None
        settings.check_config([target or Path(".")])
        if settings.errors:  # stop before reading: nothing is linted with the defaults
            for error in settings.errors:
                stderr.write(f"ema-lint: error: {error}\n")
            return 2
        file_settings = settings.for_file(target if target is not None else Path("-"))
        unsafe = file_settings.unsafe_fixes
        data = stdin.read()
        if _stdin_excluded(args, settings, target):
            return _pass_through(args, data, stdout, color)
        outcome = process_source(data, display, file_settings, mode)
        result = collect([outcome], mode)
        result.errors = settings.errors + result.errors
        result.files_checked = 1
        result.unsafe_fixes = unsafe
        if args.fix and not args.diff:
            # The fixed source goes to stdout (editors expect that); findings to stderr.
            new = outcome.new_data if outcome.new_data is not None else data
            stdout.buffer.write(new) if hasattr(stdout, "buffer") else stdout.write(new.decode())
            stdout.flush()
            _report(result, args, stderr, False)
            return _exit_code(result, args, False)
        if args.diff:
            stdout.write(outcome.diff)
            return _exit_code(result, args, bool(outcome.diff))
        _report(result, args, stdout, color)
        return _exit_code(result, args, False)

    result, outcomes = run(
        paths,
        settings,
        mode,
        force_exclude=args.force_exclude,
        jobs=args.jobs or available_cpus(),
        cache=_cache(args, settings),
    )
    if args.unsafe_fixes is None and outcomes:
        # The configuration file may turn unsafe fixes on.
        unsafe = any(settings.for_file(Path(o.path)).unsafe_fixes for o in outcomes[:1])
    result.unsafe_fixes = unsafe
    if args.add_noqa:
        return _add_noqa(result, stderr)
    if args.diff:
        diffs = [o.diff for o in outcomes if o.diff]
        for diff in diffs:
            stdout.write(diff)
        fixed = sum(o.fixed for o in outcomes if o.diff)
        if not args.quiet:
            stderr.write(f"Would fix {fixed} problem{'s' if fixed != 1 else ''}.\n")
        for error in result.errors:
            stderr.write(f"error: {error}\n")
        return _exit_code(result, args, bool(diffs))
    _report(result, args, stdout, color)
    if args.show_fixes:
        _show_fixes(result, outcomes, stdout)
    return _exit_code(result, args, False)


def _show_settings(paths: Sequence[Path], settings: Settings, stdout: TextIO) -> int:
    """``--show-settings FILE``: what runs on that file, from which configuration."""
    if len(paths) != 1 or str(paths[0]) == "-":
        raise UsageError("--show-settings takes exactly one file")
    path = paths[0]
    config = settings.config_for(path)
    for error in settings.errors:
        stdout.write(f"error: {error}\n")
    file_settings = settings.for_file(path)
    document = {
        "file": str(path),
        "configuration": str(config.path) if config.path is not None else None,
        "excluded": settings.excluded(path),
        "respect-gitignore": settings.respects_gitignore(path),
        "rules": list(file_settings.codes),
        "ignored": sorted(file_settings.ignored),
        "rule-options": file_settings.options,
        "noqa": file_settings.noqa,
        "unsafe-fixes": file_settings.unsafe_fixes,
    }
    json.dump(document, stdout, indent=2, default=str)
    stdout.write("\n")
    return 2 if settings.errors else 0


def _to_output_file(
    args: argparse.Namespace, stdout: TextIO, stderr: TextIO, stdin: io.BufferedIOBase
) -> int:
    """``--output-file``: the report goes to the file, uncoloured."""
    if args.fix and not args.diff and any(str(p) == "-" for p in args.paths):
        raise UsageError("--output-file cannot be combined with --fix on stdin")
    path = args.output_file
    args.output_file = None
    args.color = "never"
    buffer = io.StringIO()
    code = _check(args, buffer, stderr, stdin)
    try:
        path.write_text(buffer.getvalue(), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"{path}: cannot write the report: {error.strerror or error}") from None
    return code


def _add_noqa(result: RunResult, stderr: TextIO) -> int:
    from .adoption import add_noqa

    added, errors = add_noqa(result.diagnostics)
    for error in [*result.errors, *errors]:
        stderr.write(f"error: {error}\n")
    stderr.write(f"Added {added} noqa directive{'s' if added != 1 else ''}.\n")
    return 2 if result.errors or errors else 0


def _show_fixes(result: RunResult, outcomes: Sequence[FileOutcome], stdout: TextIO) -> None:
    """The fixes applied per file (``--fix``), or each finding's available fix."""
    if result.fix_mode:
        fixed = [o for o in outcomes if o.fixed]
        if fixed:
            stdout.write("\nFixed:\n")
        for o in fixed:
            stdout.write(f"  {o.path}: {o.fixed} fix{'es' if o.fixed != 1 else ''} applied\n")
        return
    available = [d for d in result.diagnostics if d.fix is not None]
    if available:
        stdout.write("\nFixes available:\n")
    for d in available:
        assert d.fix is not None
        marker = "[*]" if result.fixable(d) else "[unsafe]"
        stdout.write(f"  {d.path}:{d.line}:{d.column} {d.code} {marker} {d.fix.title}\n")


def _clean(args: argparse.Namespace, stdout: TextIO) -> int:
    """``ema-lint clean``: remove the results cache of the current project."""
    from .adoption import clean

    if args.cache_dir is not None:
        folder = args.cache_dir
    else:
        settings = Settings()
        config = settings.config_for(Path.cwd())
        folder = default_dir(config.path.parent if config.path is not None else Path.cwd())
    removed = clean(folder)
    stdout.write(f"{'Removed' if removed else 'No cache at'} {folder}\n")
    return 0


def _stdin_excluded(args: argparse.Namespace, settings: Settings, target: Path | None) -> bool:
    """``--force-exclude`` holds for ``--stdin-filename`` too (editors and pre-commit)."""
    if not args.force_exclude or target is None:
        return False
    from .discovery import excluded_with_parents

    return excluded_with_parents(target, settings)


def _pass_through(args: argparse.Namespace, data: bytes, stdout: TextIO, color: bool) -> int:
    """An excluded stdin file: nothing checked; with ``--fix`` the text comes back as is."""
    if args.fix and not args.diff:
        stdout.buffer.write(data) if hasattr(stdout, "buffer") else stdout.write(data.decode())
        stdout.flush()
    elif not args.diff:
        _report(RunResult(), args, stdout, color)
    return 0


def _report(result: RunResult, args: argparse.Namespace, stream: TextIO, color: bool) -> None:
    if args.statistics:
        _statistics(result, stream, args.output_format)
        return
    if args.output_format == "text" and args.quiet:
        renderers()["concise"](result, stream, color)
        return
    renderers()[args.output_format](result, stream, color)


def _rules(args: argparse.Namespace, stdout: TextIO) -> int:
    from .rule_docs import fix_summary

    rules = registry.all_rules()
    if args.output_format == "json":
        json.dump(
            [
                {
                    "code": r.code,
                    "name": r.name,
                    "summary": r.summary,
                    "fix": fix_summary(r),
                    "default": r.default_enabled,
                }
                for r in rules
            ],
            stdout,
            indent=2,
        )
        stdout.write("\n")
        return 0
    width = max(len(r.name) for r in rules)
    stdout.write(f"{'code':<7} {'name':<{width}} {'fix':<18} default  summary\n")
    for r in rules:
        stdout.write(
            f"{r.code:<7} {r.name:<{width}} {fix_summary(r):<18} "
            f"{'on' if r.default_enabled else 'off':<8} {r.summary}\n"
        )
    return 0


def _explain(args: argparse.Namespace, stdout: TextIO) -> int:
    from .rule_docs import render

    rule = registry.lookup(args.rule)
    if rule is None:
        raise UsageError(f"unknown rule {args.rule!r}; see 'ema-lint rules'")
    stdout.write(render(rule))
    return 0


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: io.BufferedIOBase | None = None,
) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    stdin = stdin or sys.stdin.buffer
    if argv is None:  # this process is the command (not a host calling it)
        use_batch_schedule()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        _mistyped_command(argv)
        args = parser.parse_args(_normalize_argv(argv))
        if args.command == "rules":
            return _rules(args, stdout)
        if args.command == "explain":
            return _explain(args, stdout)
        if args.command == "server":
            return _server(stderr)
        if args.command == "clean":
            return _clean(args, stdout)
        return _check(args, stdout, stderr, stdin)
    except UsageError as error:
        stderr.write(f"ema-lint: error: {error}\n")
        return 2
    except ConfigError as error:
        stderr.write(f"ema-lint: error: {error}\n")
        return 2
    except KeyboardInterrupt:
        stderr.write("ema-lint: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
