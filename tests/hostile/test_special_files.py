"""Paths that are not regular files, and folders the user cannot read.

A FIFO named on the command line used to block the run forever, ``/dev/zero`` to read
until memory ran out, and a folder without read permission to end the walk with a
``PermissionError`` traceback. Each is now one line, and the other files are checked.
These run the command in a child process: a regression must fail the test, not hang it.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.samples import BAD

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
GUARD = 120  # seconds: only a hang reaches it
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")


def _limit_memory() -> None:
    # A regression reading /dev/zero must fail with MemoryError, not take the machine.
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _ema_lint(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ema_lint", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=GUARD,
        preexec_fn=_limit_memory,
        check=False,
    )


@needs_fifo
@pytest.mark.parametrize("through", ["fifo", "link-to-fifo", "dev-zero"])
def test_a_special_file_named_on_the_command_line_is_refused(project: Path, through: str) -> None:
    (project / "train.py").write_text(BAD)
    os.mkfifo(project / "pipe.py")
    if through == "link-to-fifo":
        (project / "alias.py").symlink_to("pipe.py")
        named = "alias.py"
    elif through == "dev-zero":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        named = "/dev/zero"
    else:
        named = "pipe.py"
    for flags in ((), ("--fix", "--no-cache", "-j2")):
        done = _ema_lint(project, *flags, named, "train.py")
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stdout + done.stderr
        errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "not a regular file" in errors[0], done.stdout
        assert named in errors[0]
        assert "train.py:3:31: EMA101" in done.stdout


@needs_fifo
def test_special_files_the_project_model_would_read_are_passed_over(project: Path) -> None:
    # Only train.py is named: the FIFOs are an imported module and a would-be importer,
    # which the project model reads on its own (for summaries and callers).
    (project / "setup.cfg").write_text("")
    caller = "\n\ndef train_one_epoch(model, model_ema):\n    model_ema.update(model)\n"
    (project / "train.py").write_text("from helpers import ModelEMA\n" + BAD + caller)
    os.mkfifo(project / "helpers.py")
    os.mkfifo(project / "engine.py")
    done = _ema_lint(project, "--no-cache", "train.py")
    assert "Traceback" not in done.stdout + done.stderr
    assert "train.py:4:31: EMA101" in done.stdout, done.stdout


@needs_fifo
def test_a_configuration_that_is_a_fifo_is_refused(project: Path) -> None:
    (project / "train.py").write_text(BAD)
    os.mkfifo(project / "ema-lint.toml")
    done = _ema_lint(project, "--config", "ema-lint.toml", "train.py")
    assert done.returncode == 2
    assert "ema-lint.toml: cannot read: not a regular file" in done.stderr
    assert "Traceback" not in done.stderr


# Folders the user cannot read: as root every folder is readable, so the command runs in a
# child that drops its effective user to nobody after importing ema-lint (the interpreter
# itself may sit in a folder only root can read).
AS_NOBODY = f"""
import os, sys
from ema_lint import cli, engine, registry, reporters, runner, sources
import concurrent.futures, difflib, multiprocessing, subprocess, tomllib, xml.etree.ElementTree
from ema_lint.reporters import text  # the formats are imported when they render
registry.all_rules()
os.setegid({NOBODY})
os.seteuid({NOBODY})
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.fixture
def locked_tree() -> Iterator[Path]:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root to act as another user (as any user, the walk is the same)")
    top = Path(tempfile.mkdtemp(prefix="ema-lint-locked-"))
    try:
        project = top / "project"
        (project / "locked" / "inner").mkdir(parents=True)
        (project / "pyproject.toml").write_text("[tool.ema-lint]\n")
        (project / "train.py").write_text(BAD)
        (project / "locked" / "secret.py").write_text(BAD)
        (project / "locked" / "inner" / "deep.py").write_text(BAD)
        for path in [top, *top.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        os.chmod(top, 0o755)
        os.chmod(project / "locked", 0o000)
        yield project
    finally:
        os.chmod(top / "project" / "locked", 0o755)
        shutil.rmtree(top, ignore_errors=True)


def _as_nobody(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", AS_NOBODY, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=GUARD,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((".",), "error: ./locked: cannot read directory: Permission denied"),
        (("--no-cache", "-j2", "."), "error: ./locked: cannot read directory: Permission denied"),
        (("locked", "train.py"), "error: locked: cannot read directory: Permission denied"),
        (("locked/secret.py", "train.py"), "error: locked/secret.py: cannot read: Permission"),
        (("--fix", "locked/inner", "train.py"), "error: locked/inner: cannot read: Permission"),
    ],
    ids=["walk", "walk-pool", "named-folder", "file-inside", "folder-inside"],
)
def test_an_unreadable_folder_is_reported_and_skipped(
    locked_tree: Path, args: tuple[str, ...], error: str
) -> None:
    # A check that the child really cannot read the folder (else the test proves nothing).
    probe = _as_nobody(locked_tree, "locked/secret.py")
    assert "Permission denied" in probe.stdout, probe.stdout + probe.stderr
    done = _as_nobody(locked_tree, *args)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 2
    errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(error), done.stdout
    assert "train.py:3:31: EMA101" in done.stdout
