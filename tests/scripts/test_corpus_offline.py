"""Offline tests of the benchmark and ecosystem scripts' pure parts.

No network, no downloads, no torch, ruff, TorchFix or fixit: archives are built in
tmp_path and child processes are the running interpreter.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


corpus = _load("corpus", ROOT / "scripts" / "corpus.py")
run = _load("bench_run", ROOT / "benchmarks" / "run.py")
ecosystem = _load("ecosystem", ROOT / "scripts" / "ecosystem.py")


# --- the EMA-dense filter -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "model_ema = ModelEmaV2(model)",
        "ema.update(model)",
        "self.ema_decay = 0.999",
        "from timm.utils import ModelEma",
        "class EmaModel: pass",
        "MODEL_EMA = True",
        "helper = EMAHelper()",
        "x = ModelEMA(m)",
        "ema_model.copy_to()",
        "use_swa: bool = False",
        "swa_model = AveragedModel(model)",
        "sched = SWALR(opt, swa_lr=0.05)",
        "torch.optim.swa_utils.update_bn(loader, swa_model)",
        "ExponentialMovingAverage(params, decay=0.99)",
        "# keep an EMA of the weights",
        "decay(ema)",
    ],
)
def test_ema_dense_matches_identifier_components(text):
    assert corpus.is_ema_dense(text)


@pytest.mark.parametrize(
    "text",
    [
        "schema = load_schema()",
        "import emacs",
        "x = x.swapaxes(0, 1)",
        "SWAP_BYTES = 1",
        "EMAIL = 'a@b.c'",
        "def cinema_theme(): pass",
        "swagger_ui = True",
        "class Swap: pass",
        "anemia = 1",
        "",
    ],
)
def test_ema_dense_ignores_words_that_only_contain_the_letters(text):
    assert not corpus.is_ema_dense(text)


# --- archives and the cache -----------------------------------------------------------


PKG = corpus.Package("Demo_Pkg", "1.2.0", "sdist", (corpus.BENCH,))


def test_archive_kind_accepts_normalized_names_and_rejects_other_versions():
    assert corpus.archive_kind("demo_pkg-1.2.0.tar.gz", PKG) == "sdist"
    assert corpus.archive_kind("demo-pkg-1.2.0.tar.gz", PKG) is None  # split at the first '-'
    assert corpus.archive_kind("Demo_Pkg-1.2.0.zip", PKG) == "sdist"
    assert corpus.archive_kind("demo_pkg-1.2.0-py3-none-any.whl", PKG) == "wheel"
    assert corpus.archive_kind("demo_pkg-1.2.01.tar.gz", PKG) is None
    assert corpus.archive_kind("demo_pkg-1.2.0.1-py3-none-any.whl", PKG) is None
    assert corpus.archive_kind("other-1.2.0.tar.gz", PKG) is None


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_unpack_sdist_keeps_sources_strips_top_folder_and_skips_unsafe_paths(tmp_path):
    archive = _tar(
        tmp_path / "demo_pkg-1.2.0.tar.gz",
        {
            "demo_pkg-1.2.0/demo/__init__.py": b"x = 1\n",
            "demo_pkg-1.2.0/demo/cfg.yaml": b"a: 1\n",
            "demo_pkg-1.2.0/nb/train.ipynb": b"{}",
            "demo_pkg-1.2.0/demo/_ext.c": b"int x;",
            "demo_pkg-1.2.0/README.md": b"# demo",
            "../evil.py": b"boom",
        },
    )
    dest = tmp_path / "out"
    assert corpus.unpack(archive, dest, is_sdist=True) == 3
    kept = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert kept == ["demo/__init__.py", "demo/cfg.yaml", "nb/train.ipynb"]
    assert not (tmp_path / "evil.py").exists()


def test_unpack_wheel_keeps_the_package_folder(tmp_path):
    archive = tmp_path / "demo_pkg-1.2.0-py3-none-any.whl"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("demo/__init__.py", "x = 1\n")
        zf.writestr("demo_pkg-1.2.0.dist-info/METADATA", "Name: demo")
    dest = tmp_path / "out"
    assert corpus.unpack(archive, dest, is_sdist=False) == 1
    assert (dest / "demo" / "__init__.py").read_text() == "x = 1\n"


def test_ensure_uses_a_cached_archive_and_then_the_marker(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("must not download")

    monkeypatch.setattr(corpus, "pip_download", no_network)
    (tmp_path / "dist").mkdir()
    _tar(
        tmp_path / "dist" / "demo_pkg-1.2.0.tar.gz",
        {"demo_pkg-1.2.0/demo/a.py": b"a = 1\nb = 2\n", "demo_pkg-1.2.0/demo/b.py": b"ema = 1\n"},
    )
    first = corpus.ensure([PKG], tmp_path, log=lambda msg: None)
    assert [f.downloaded for f in first] == [False]
    assert first[0].path == tmp_path / "src" / "demo_pkg-1.2.0"
    assert (first[0].path / corpus.COMPLETE_MARKER).is_file()
    (tmp_path / "dist" / "demo_pkg-1.2.0.tar.gz").unlink()  # the marker alone is enough now
    second = corpus.ensure([PKG], tmp_path, log=lambda msg: None)
    assert second[0].path == first[0].path
    counts = corpus.count_tree(second[0].path)
    assert (counts.files, counts.lines) == (2, 3)


def test_build_view_links_only_kept_python_files(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("model_ema = 1\n")
    (src / "pkg" / "b.py").write_text("schema = 1\n")
    (src / "pkg" / "c.yaml").write_text("ema: 1\n")
    counts = corpus.build_view(
        tmp_path / "view", [("demo", src)], lambda p: corpus.is_ema_dense(p.read_text())
    )
    assert (counts.files, counts.lines) == (1, 1)
    assert [p.name for p in (tmp_path / "view").rglob("*") if p.is_file()] == ["a.py"]


def test_counts_table_has_a_total_row():
    rows = [
        (PKG, corpus.Counts(2, 30, 300), corpus.Counts(1, 5, 50)),
        (PKG, corpus.Counts(3, 1000, 9000), corpus.Counts()),
    ]
    table = corpus.format_counts_table(rows).splitlines()
    assert table[2] == "| Demo_Pkg | 1.2.0 | sdist | 2 | 30 | 1 |"
    assert table[-1] == "| **total** | | | 5 | 1,030 | 1 |"


# --- the benchmark runner -------------------------------------------------------------


def _result(tool_id: str, view: str, walls: list[float], peak: float = 50.0):
    tool = run.Tool(tool_id, tool_id, "env", lambda c: [])
    runs = [run.Run(w, w, peak, 0.0, 0) for w in walls]
    return run.Result(tool, view, runs)


def test_results_table_formats_rates_and_ratio_to_the_reference():
    res = _result("ema-lint-cold", "main", [2.0, 1.0, 3.0])
    row = run.result_row(res, corpus.Counts(100, 50_000, 0))
    table = run.format_table([row, {"label": "fixit", "error": "not available: no"}], 4.0)
    lines = table.splitlines()
    assert lines[0].startswith("| tool | runs | wall s median | wall s min |")
    assert lines[2] == "| ema-lint-cold | 3 | 2.000 | 1.000 | 2.00 | 50.0 | 25,000 | 50 | 0.500x |"
    assert lines[3].startswith("| fixit | - | not available: no |")


def test_ratio_format():
    assert run.fmt_ratio(123.4) == "123x"
    assert run.fmt_ratio(2.345) == "2.35x"
    assert run.fmt_ratio(0.0123) == "0.012x"


def test_detect_flags_reads_help_text():
    help_text = "  --no-cache   do not cache\n  --jobs N   workers\n  --no-cache-dir-x  other\n"
    assert run.detect_flags(help_text) == {"--no-cache", "--jobs"}


def test_parse_tools_accepts_groups_and_ids():
    assert run.parse_tools("ruff") == {"ruff-cold", "ruff-warm"}
    assert run.parse_tools("libcst,fixit") == {"libcst-parse", "fixit"}
    assert run.parse_tools(None) == set(run.TOOL_GROUPS)
    with pytest.raises(SystemExit):
        run.parse_tools("pylint")
    assert run.envs_needed({"flake8-F"}) == ["ema-lint", "flake8"]


def test_plan_puts_slow_tools_on_the_sample_with_ema_lint_for_the_ratio():
    ids = ["ema-lint-j1", "ema-lint-cold", "libcst-parse", "ruff-cold", "torchfix", "fixit"]
    plan = run.build_plan(ids, "sample")
    assert ("torchfix", "main") not in plan
    assert {("torchfix", "sample"), ("fixit", "sample"), ("ema-lint-cold", "sample")} <= set(plan)
    assert {("ema-lint-j1", "dense"), ("libcst-parse", "dense")} <= set(plan)
    assert ("torchfix", "main") in run.build_plan(ids, "main")


def test_targets_pass_and_miss_with_margins():
    results = {
        ("ema-lint-cold", "main"): _result("ema-lint-cold", "main", [1.0], peak=120),
        ("ruff-cold", "main"): _result("ruff-cold", "main", [0.1]),
        ("ema-lint-cold", "sample"): _result("ema-lint-cold", "sample", [0.1]),
        ("torchfix", "sample"): _result("torchfix", "sample", [10.0]),
        ("ema-lint-j1", "dense"): _result("ema-lint-j1", "dense", [1.2]),
        ("libcst-parse", "dense"): _result("libcst-parse", "dense", [1.0]),
        ("flake8-F+ema", "main"): _result("flake8-F+ema", "main", [10.5]),
        ("flake8-F", "main"): _result("flake8-F", "main", [10.0]),
        ("flake8-F,EMA", "main"): _result("flake8-F,EMA", "main", [12.0]),
    }
    by_name = {t.name: t for t in run.evaluate_targets(results)}
    ruff = by_name["whole corpus cold within 5x of ruff --select E9,F --no-cache"]
    assert ruff.status == "MISS" and "2.00x the limit" in ruff.detail
    torchfix = by_name[">= 50x faster than TorchFix standalone"]
    assert torchfix.status == "PASS" and "100.0x on the sample" in torchfix.detail
    assert by_name[">= 50x faster than fixit lint"].status == "n/a"
    dense = by_name["EMA-dense files: ema-lint (1 job, no cache) <= 1.3x bare libcst parse"]
    assert dense.status == "PASS"
    users = by_name["flake8 --select F,EMA <= 1.10x flake8 --select F without ema-lint (CPU)"]
    assert users.status == "MISS", users.detail
    assert by_name["flake8 plugin adds <= 10% to flake8 --select F"].status == "PASS"
    assert by_name["peak memory < 300 MB with default jobs"].status == "PASS"
    assert by_name["warm cache within 2x of ruff with its cache"].status == "n/a"
    assert "| **MISS** |" in run.format_targets(list(by_name.values()))


def test_cold_target_says_what_the_parse_of_the_files_it_parses_alone_costs():
    results = {
        ("ema-lint-cold", "main"): _result("ema-lint-cold", "main", [4.0]),
        ("ruff-cold", "main"): _result("ruff-cold", "main", [0.5]),
        ("libcst-parse", "parsed"): _result("libcst-parse", "parsed", [3.5]),
    }
    by_name = {t.name: t for t in run.evaluate_targets(results)}
    cold = by_name["whole corpus cold within 5x of ruff --select E9,F --no-cache"]
    assert "libcst parse of the files it parses alone takes 3.5 s CPU, 7.0x ruff's" in cold.detail


def test_rows_with_their_own_repeat_run_that_many_times(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "QUICK_SECONDS", 0.0)  # no run counts as sub-second here
    views = {"main": run.View("main", tmp_path, corpus.Counts(1, 1, 1))}
    plain = run.Tool("plain", "plain", "env", lambda c: [sys.executable, "-c", "pass"])
    more = run.Tool("more", "more", "env", lambda c: [sys.executable, "-c", "pass"], repeat=4)
    plan = [("plain", "main"), ("more", "main")]
    results = run.run_tools([plain, more], views, plan, 2, tmp_path, lambda m: None, 60)
    assert len(results[("plain", "main")].runs) == 2
    assert len(results[("more", "main")].runs) == 4


def test_parsed_sources_records_only_the_files_ema_lint_parses(tmp_path):
    parsed = _load("parsed_sources", ROOT / "benchmarks" / "parsed_sources.py")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(
        "from timm.utils import ModelEmaV2\n\nema = ModelEmaV2(model, decay=0.9)\n"
    )
    (project / "plain.py").write_text("def add(a, b):\n    return a + b\n")
    sources = parsed.record([str(project)])
    assert len(sources) == 1 and b"ModelEmaV2" in sources[0]


def test_every_nth_is_deterministic():
    paths = [Path(f"f{i:02}.py") for i in range(10)]
    assert run.every_nth(reversed(paths), 4) == {Path("f00.py"), Path("f04.py"), Path("f08.py")}


def test_measure_reports_wall_cpu_memory_and_exit_code(tmp_path):
    r = run.measure([sys.executable, "-c", "import sys; sys.exit(3)"], cwd=tmp_path)
    assert r.returncode == 3
    assert r.wall > 0 and r.cpu >= 0
    assert r.peak_mb > 1  # a Python interpreter is bigger than a megabyte


# --- the ecosystem check --------------------------------------------------------------


def test_baseline_comparison_ignores_comment_lines():
    base = "a\nb\n# runtime: 10 s\n"
    assert ecosystem.baseline_diff(base, "a\nb\n# runtime: 99 s\n# extra\n") == ""
    diff = ecosystem.baseline_diff(base, "a\nc\n# runtime: 10 s\n")
    assert "-b\n" in diff and "+c\n" in diff


def test_report_lists_findings_and_fails_on_internal_errors():
    ok = ecosystem.PackageReport("timm-1.0", files=3)
    ok.findings = [("timm/ema.py", 4, 1, "EMA101", "decay 0.5 is out of range")]
    ok.fixed_files = ["timm/ema.py"]
    bad = ecosystem.PackageReport("demo-0.1", files=1)
    bad.findings = [("x.py", 1, 1, "EMA902", "rule crashed")]
    bad.not_idempotent = ["x.py"]
    text = ecosystem.render([ok, bad])
    assert "timm-1.0: 3 .py files, 1 findings (EMA101 1)" in text
    assert "EMA101: 1 (timm-1.0 1)" in text
    assert "timm-1.0/timm/ema.py:4:1: EMA101 decay 0.5 is out of range" in text
    assert "FAIL demo-0.1/x.py:1:1: EMA902 rule crashed" in text
    assert "FAIL demo-0.1/x.py: a second --fix changed it again" in text
    assert ecosystem.check_failures([ok]) == []
    assert ecosystem.render([ok])[-1] == "all checks passed"


def test_relative_path_and_parse_check(tmp_path):
    assert ecosystem.relative_path("./a/b.py", tmp_path, tmp_path) == "a/b.py"
    assert ecosystem.relative_path(str(tmp_path / "c.py"), tmp_path, tmp_path) == "c.py"
    assert ecosystem.parses(b"x = 1\n")
    assert not ecosystem.parses(b"def (:\n")


def test_notebook_parse_check_skips_magics_and_markdown():
    good = (
        b'{"cells": [{"cell_type": "code", "source": ["%matplotlib inline\\n", "x = 1\\n"]},'
        b' {"cell_type": "markdown", "source": "def (:"}]}'
    )
    assert ecosystem.parses(good, "nb.ipynb")
    bad = b'{"cells": [{"cell_type": "code", "source": "def (:"}]}'
    assert not ecosystem.parses(bad, "nb.ipynb")
    assert not ecosystem.parses(b"not json", "nb.ipynb")


def test_unparseable_input_is_not_an_internal_error():
    report = ecosystem.PackageReport(
        "pkg",
        findings=[
            ("broken.py", 2, 1, "EMA901", "cannot parse: invalid syntax"),
            ("fine.py", 3, 1, "EMA901", "cannot parse: libcst disagrees with CPython"),
            ("crash.py", 1, 1, "EMA902", "rule EMA101 crashed"),
        ],
        invalid_sources={"broken.py"},
    )
    assert [f[0] for f in report.internal] == ["fine.py", "crash.py"]


# --- the baseline checkout --------------------------------------------------------------


def test_baseline_source_extracts_the_package_at_a_ref_and_runs_it(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    sha, source = run.baseline_source("HEAD", tmp_path)
    assert (source / "ema_lint" / "cli.py").is_file()
    assert run.baseline_source("HEAD", tmp_path) == (sha, source)  # extracted once
    code = run.BASELINE_BOOT.replace("sys.exit(main())", "print(ema_lint.__file__)")
    done = run.measure([sys.executable, "-c", code, str(source)], cwd=tmp_path)
    assert done.returncode == 0
    env = run.Env("ema-lint", Path(sys.prefix))
    tool = run.build_tools({"ema-lint": env}, tmp_path, set(), 2, [], (sha, source))[0]
    assert tool.id == "ema-lint-baseline" and sha in tool.label
    argv = tool.argv(tmp_path)
    assert argv[3] == str(source) and "--no-cache" in argv and argv[-1] == str(tmp_path)
