"""A run with nothing to parse imports neither libcst nor the rules: every file settled by
the pre-filter or the cache costs a stat (or a read) and nothing else. Checked in a fresh
interpreter, the only place the set of imported modules means something."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.samples import BAD

_RUN = textwrap.dedent(
    """
    import io, sys
    from ema_lint.cli import main
    out = io.StringIO()
    code = main(sys.argv[1:], stdout=out, stderr=out)
    # The naming vocabulary is plain Python: the pre-filter's name triggers run its tests.
    # Import resolution is plain Python too: a file without triggers that imports a project
    # module about averaging is still parsed.
    light = {"ema_lint.analysis", "ema_lint.analysis.syntax", "ema_lint.analysis.syntax.vocabulary",
        "ema_lint.analysis.project", "ema_lint.analysis.project.admission",
        "ema_lint.analysis.project.resolution"}
    heavy = sorted(m for m in sys.modules if m not in light and (m == "libcst" or
        m.startswith(("libcst.", "ema_lint.rules.", "ema_lint.analysis", "ema_lint.engine"))))
    print(code, heavy, out.getvalue().count("EMA101"))
    """
)


def _run(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_warm_run_imports_neither_libcst_nor_the_rules(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ema-lint]\n")
    (tmp_path / "train.py").write_text(BAD)  # a finding, served by the cache when warm
    (tmp_path / "model.py").write_text("import torch\nx = torch.zeros(3)\n")  # no trigger
    args = (".", "--cache-dir", str(tmp_path / "cache"), "--jobs", "1")
    cold = _run(*args, cwd=tmp_path)
    assert cold.startswith("1 [") and "'libcst'" in cold and cold.endswith(" 1")
    warm = _run(*args, cwd=tmp_path)
    assert warm == "1 [] 1", warm


def test_a_run_over_files_without_triggers_imports_no_rule(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ema-lint]\nselect = ['EMA1']\n")
    (tmp_path / "model.py").write_text("import torch\nx = torch.zeros(3)\n")
    assert _run(".", "--no-cache", cwd=tmp_path) == "0 [] 0"


def test_import_ema_lint_is_cheap_and_the_api_still_works(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys, ema_lint
        assert "libcst" not in sys.modules and "ema_lint.diagnostics" not in sys.modules
        assert ema_lint.Diagnostic.__name__ == "Diagnostic" and "Position" in dir(ema_lint)
        source = "from timm.utils import ModelEmaV2\\ne = ModelEmaV2(m, decay=0.9)\\n"
        found = ema_lint.check(source)
        assert [d.code for d in found] == ["EMA101"], found
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr


_FLAKE8 = textwrap.dedent(
    """
    import sys
    from flake8.main.application import Application
    app = Application()
    app.run(sys.argv[1:])
    plugins = [p.plugin.package for p in app.plugins.all_plugins()] if app.plugins else []
    heavy = sorted(m for m in sys.modules if m == "libcst" or m.startswith("ema_lint.rules."))
    print("ema-lint" in plugins, heavy, app.result_count)
    """
)


def test_flake8_without_ema_codes_selected_imports_no_rule(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(BAD)
    (tmp_path / "model.py").write_text("import os\n")
    done = subprocess.run(
        [sys.executable, "-c", _FLAKE8, "--isolated", "--select", "F", "train.py", "model.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.strip().splitlines()[-1] == "True [] 2", done.stdout + done.stderr
    # With EMA selected, the plugin loads the rules for the file with a trigger.
    done = subprocess.run(
        [sys.executable, "-c", _FLAKE8, "--isolated", "--select", "EMA,F", "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("True [") and "'libcst'" in last and last.endswith(" 2"), last


def test_flake8_forking_workers_imports_the_engine_once_before_the_fork(tmp_path: Path) -> None:
    """With EMA codes selected and workers to fork, the main process imports the engine
    before forking (each worker would import it again); one job imports it only for a
    file with a trigger."""
    (tmp_path / "a.py").write_text("import os\n")
    (tmp_path / "b.py").write_text("import sys\n")

    def heavy(*jobs: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _FLAKE8, "--isolated", "--select", "EMA,F", *jobs, "."],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip().splitlines()[-1]

    forked = heavy("--jobs", "2")
    assert forked.startswith("True [") and "'libcst'" in forked, forked
    assert heavy("--jobs", "1") == "True [] 2"
