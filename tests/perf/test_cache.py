"""The results cache: hits re-serialize exactly; any change of content, configuration or
build is a miss; corrupt entries and unwritable folders are harmless; it stays bounded."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from ema_lint import cache as cache_module
from ema_lint import engine
from ema_lint.cache import Cache, content_hash
from ema_lint.diagnostics import Applicability, Diagnostic, Fix, Position, TextEdit
from tests.samples import BAD, GOOD

TWO = (
    "from timm.utils import ModelEmaV2\n"
    "EMA_DECAY = 0.99\n"
    "a = ModelEmaV2(model, decay=EMA_DECAY)\n"
    "b = ModelEmaV2(model, decay=0.99999)  # noqa: EMA999\n"
)


@pytest.fixture
def engine_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths the engine parsed in this process (runs use --jobs 1 to stay in-process)."""
    calls: list[str] = []
    real = engine.analyze

    def counting(data, path, settings, **kwargs):
        analysis = real(data, path, settings, **kwargs)
        if analysis.parsed:
            calls.append(path)
        return analysis

    monkeypatch.setattr(engine, "analyze", counting)
    return calls


def _entries(directory: Path) -> list[Path]:
    return [
        p
        for p in directory.rglob("*")
        if p.is_file() and p.parent.parent.parent == directory and not p.name.startswith(".")
    ]


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--unsafe-fixes",),
        ("--output-format", "json"),
        ("--output-format", "concise"),
        ("--statistics",),
        ("--unsafe-fixes", "--output-format", "json"),
    ],
    ids=lambda f: " ".join(f) or "text",
)
def test_a_hit_prints_exactly_what_a_cold_run_prints(
    run, project: Path, engine_calls: list[str], flags: tuple[str, ...]
) -> None:
    (project / "a.py").write_text(TWO)
    (project / "b.py").write_text(BAD)
    (project / "c.py").write_text(GOOD)
    (project / "d.py").write_text("x = 1\n")  # no trigger: never parsed, never stored
    cold = run("--jobs", "1", "--no-cache", *flags, ".", cwd=project)
    first = run("--jobs", "1", *flags, ".", cwd=project)
    assert sorted(engine_calls) == sorted(["a.py", "b.py", "c.py"] * 2)
    engine_calls.clear()
    warm = run("--jobs", "1", *flags, ".", cwd=project)
    assert engine_calls == []
    assert (warm.code, warm.out, warm.err) == (cold.code, cold.out, cold.err)
    assert (first.code, first.out) == (cold.code, cold.out)
    assert (project / ".ema_lint_cache" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_content_change_is_a_miss(run, project: Path, engine_calls: list[str]) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    assert run("-j1", "train.py", cwd=project).code == 1
    path.write_text(GOOD)
    result = run("-j1", "train.py", cwd=project)
    assert result.code == 0 and engine_calls == ["train.py", "train.py"]
    path.write_text(BAD)  # back to known content: a hit again
    assert run("-j1", "train.py", cwd=project).code == 1
    assert len(engine_calls) == 2


def test_configuration_changes_are_misses(run, project: Path, engine_calls: list[str]) -> None:
    (project / "train.py").write_text(BAD)
    assert run("-j1", "train.py", cwd=project).code == 1
    # A rule option in the configuration file.
    (project / "pyproject.toml").write_text(
        "[tool.ema-lint]\n[tool.ema-lint.ema-decay-out-of-range]\nmin = 0.9\n"
    )
    assert run("-j1", "train.py", cwd=project).code == 0
    # The same option on the command line, the selection, noqa.
    assert run("-j1", "--option", "EMA101.min=0.995", "train.py", cwd=project).code == 1
    assert len(engine_calls) == 3
    # The same effective configuration, however it is written, is the same entry.
    assert run("-j1", "--option", "EMA101.min=0.9", "train.py", cwd=project).code == 0
    assert len(engine_calls) == 3
    (project / "pyproject.toml").write_text("[tool.ema-lint]\n")
    # No rule left whose triggers the file holds: nothing parsed.
    assert run("-j1", "--select", "EMA9", "train.py", cwd=project).code == 0
    assert len(engine_calls) == 3
    assert run("-j1", "train.py", cwd=project).code == 1
    assert len(engine_calls) == 3  # the first configuration again: a hit
    assert run("-j1", "--disable-noqa", "train.py", cwd=project).code == 1
    assert len(engine_calls) == 4


def test_a_per_file_ignore_and_another_path_are_misses(
    run, project: Path, engine_calls: list[str]
) -> None:
    (project / "a.py").write_text(BAD)
    (project / "b.py").write_text(BAD)  # same content, another path: its own findings
    result = run("-j1", ".", cwd=project)
    assert "a.py:3:31" in result.out and "b.py:3:31" in result.out
    warm = run("-j1", ".", cwd=project)
    assert warm.out == result.out and len(engine_calls) == 2
    (project / "pyproject.toml").write_text(
        '[tool.ema-lint]\n[tool.ema-lint.per-file-ignores]\n"b.py" = ["EMA101"]\n'
    )
    ignored = run("-j1", ".", cwd=project)
    assert "a.py:3:31" in ignored.out and "b.py" not in ignored.out


def test_a_new_build_is_a_miss(
    run, project: Path, engine_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "train.py").write_text(BAD)
    run("-j1", "train.py", cwd=project)
    run("-j1", "train.py", cwd=project)
    assert len(engine_calls) == 1
    monkeypatch.setattr(cache_module, "__version__", "99.0.0")
    run("-j1", "train.py", cwd=project)
    assert len(engine_calls) == 2
    builds = sorted(p.name for p in (project / ".ema_lint_cache").iterdir() if p.is_dir())
    assert len(builds) == 2 and builds[1].startswith("99.0.0-")


def test_the_build_id_follows_the_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    first = cache_module.build_id()
    assert first == cache_module.build_id()
    module = Path(cache_module.__file__)
    stat = module.stat()
    try:
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert cache_module.build_id() != first
    finally:
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"{",
        b"\xff\xfe not json",
        b"[]",
        b'{"format": 1, "content": "other", "entries": {}}',
        b'{"format": 999, "entries": {}}',
        None,  # the right envelope with entries of the wrong shape
    ],
    ids=["empty", "truncated", "binary", "list", "foreign", "format", "shape"],
)
def test_corrupt_entries_are_misses_and_get_rewritten(
    run, project: Path, engine_calls: list[str], garbage: bytes | None
) -> None:
    (project / "train.py").write_text(BAD)
    cold = run("-j1", "--unsafe-fixes", "train.py", cwd=project)
    [entry] = _entries(project / ".ema_lint_cache")
    if garbage is None:
        document = json.loads(entry.read_bytes())
        for key in document["entries"]:
            document["entries"][key] = [{"start": "x"}, 7]
        garbage = json.dumps(document).encode()
    entry.write_bytes(garbage)
    again = run("-j1", "--unsafe-fixes", "train.py", cwd=project)
    assert (again.code, again.out) == (cold.code, cold.out)
    assert len(engine_calls) == 2
    run("-j1", "--unsafe-fixes", "train.py", cwd=project)
    assert len(engine_calls) == 2  # rewritten: a hit


def test_no_cache_neither_reads_nor_writes(run, project: Path, engine_calls: list[str]) -> None:
    (project / "train.py").write_text(BAD)
    run("-j1", "--no-cache", "train.py", cwd=project)
    run("-j1", "--no-cache", "train.py", cwd=project)
    assert not (project / ".ema_lint_cache").exists()
    assert len(engine_calls) == 2
    run("-j1", "train.py", cwd=project)
    run("-j1", "--no-cache", "train.py", cwd=project)
    assert len(engine_calls) == 4


def test_cache_dir_flag_and_environment(
    run, project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch
) -> None:
    (project / "train.py").write_text(BAD)
    chosen = tmp_path_factory.mktemp("flag") / "c"
    run("-j1", "--cache-dir", str(chosen), "train.py", cwd=project)
    assert (chosen / ".gitignore").is_file() and _entries(chosen)
    env = tmp_path_factory.mktemp("env") / "c"
    monkeypatch.setenv("EMA_LINT_CACHE_DIR", str(env))
    run("-j1", "train.py", cwd=project)
    assert _entries(env) and not (project / ".ema_lint_cache").exists()


def test_cache_sits_next_to_the_configuration(run, project: Path) -> None:
    (project / "src").mkdir()
    (project / "src" / "train.py").write_text(BAD)
    run("-j1", "train.py", cwd=project / "src")
    assert (project / ".ema_lint_cache").is_dir()
    assert not (project / "src" / ".ema_lint_cache").exists()


def test_an_unwritable_cache_is_ignored(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    (project / "blocked").write_text("a file where the cache folder would go")
    result = run("-j1", "--cache-dir", str(project / "blocked" / "c"), "train.py", cwd=project)
    assert result.code == 1 and "EMA101" in result.out and result.err == ""


def test_fix_reruns_the_engine_only_when_a_fix_would_apply(
    run, project: Path, engine_calls: list[str]
) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    run("-j1", "train.py", cwd=project)
    assert len(engine_calls) == 1
    # The cached finding's fix is unsafe: a safe --fix has nothing to do, the hit stands.
    safe = run("-j1", "--fix", "train.py", cwd=project)
    assert safe.code == 1 and path.read_text() == BAD and len(engine_calls) == 1
    fixed = run("-j1", "--fix", "--unsafe-fixes", "train.py", cwd=project)
    assert fixed.code == 0 and "decay=0.999)" in path.read_text()
    assert "1 fixed, 0 remaining" in fixed.out
    assert len(engine_calls) > 1


def test_fix_output_is_the_same_with_and_without_cache(
    run, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outputs = []
    for flags in (("--no-cache",), (), ()):
        root = tmp_path_factory.mktemp("fix")
        (root / "pyproject.toml").write_text("[tool.ema-lint]\n")
        (root / "a.py").write_text(TWO)
        (root / "b.py").write_text(GOOD)
        cache_dir = tmp_path_factory.getbasetemp() / "shared-fix-cache"
        run("-j1", "--cache-dir", str(cache_dir), *flags, ".", cwd=root)  # fill the cache
        result = run("-j1", "--cache-dir", str(cache_dir), "--fix", "--unsafe-fixes", *flags, ".")
        outputs.append((result.code, result.out, (root / "a.py").read_text()))
    assert outputs[0] == outputs[1] == outputs[2]
    assert "0.999" in outputs[0][2]


# The store itself ----------------------------------------------------------------------------
def _diagnostic(**changes) -> Diagnostic:
    fields = dict(
        code="EMA101",
        name="ema-decay-out-of-range",
        message="m ü \n",
        path="x.py",
        start=Position(3, 31),
        end=Position(3, 35),
        fix=Fix(Applicability.UNSAFE, (), "Set the decay to 0.999"),
        cell=2,
        text_edits=(TextEdit(Position(3, 31), Position(3, 35), "0.999"),),
        statement_line=3,
    )
    fields.update(changes)
    return Diagnostic(**fields)


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    tmp_path = tmp_path / "cache"
    store = Cache(tmp_path, build="b")
    diagnostics = [_diagnostic(), _diagnostic(fix=None, cell=None, text_edits=None)]
    store.put("ab" * 32, "k", diagnostics)
    back = Cache(tmp_path, build="b").get("ab" * 32, "k", "elsewhere.py")
    assert back is not None
    for old, new in zip(diagnostics, back, strict=True):
        assert new.path == "elsewhere.py"
        assert (new.code, new.name, new.message, new.start, new.end, new.cell) == (
            old.code,
            old.name,
            old.message,
            old.start,
            old.end,
            old.cell,
        )
        assert new.statement_line == old.statement_line
        assert (new.fix is None) == (old.fix is None)
        if old.fix is not None:
            assert (new.fix.applicability, new.fix.title) == (old.fix.applicability, old.fix.title)
        if old.text_edits is None:
            assert new.text_edits is None
        else:
            assert [(e.start, e.end, e.content) for e in new.text_edits] == [
                (e.start, e.end, e.content) for e in old.text_edits
            ]


def test_a_content_file_keeps_a_bounded_number_of_keys(tmp_path: Path) -> None:
    tmp_path = tmp_path / "cache"  # a folder the cache creates, so it is the cache's own
    store = Cache(tmp_path, build="b")
    digest = content_hash(b"x")
    for i in range(cache_module.KEYS_PER_CONTENT + 5):
        store.put(digest, f"k{i}", [])
    assert store.get(digest, "k0", "p") is None
    assert store.get(digest, f"k{cache_module.KEYS_PER_CONTENT + 4}", "p") == []
    assert len(_entries(tmp_path)) == 1


# Names in the layout of build_id(): pruning removes no folder named otherwise.
OLD, RECENT, CURRENT = (f"0.{n}-{'a' * 12}-libcst1.1.0-py311" for n in (1, 2, 3))


def test_prune_removes_old_entries_and_old_builds(tmp_path: Path) -> None:
    tmp_path = tmp_path / "cache"
    now = time.time()
    old_build = Cache(tmp_path, build=OLD)
    old_build.put("cd" * 32, "k", [])
    recent_build = Cache(tmp_path, build=RECENT)
    recent_build.put("cd" * 32, "k", [])
    recent_build.prune(now)  # stamps it as used now
    store = Cache(tmp_path, build=CURRENT)
    store.put("ab" * 32, "k", [])
    store.put("ef" * 32, "k", [])
    stale = store._entry_path("ef" * 32)
    ancient = now - (cache_module.MAX_AGE_DAYS + 1) * 86400
    os.utime(stale, (ancient, ancient))
    for path in (tmp_path / OLD).rglob("*"):
        os.utime(path, (ancient, ancient))
    os.utime(tmp_path / OLD, (ancient, ancient))
    store.prune(now)
    assert not (tmp_path / OLD).exists()
    assert (tmp_path / RECENT).is_dir()
    assert not stale.exists() and store.get("ab" * 32, "k", "p") == []
    # At most once a day: a second prune right after does nothing.
    store.put("ef" * 32, "k", [])
    os.utime(stale, (ancient, ancient))
    store.prune(now + 60)
    assert stale.exists()
    store.prune(now + cache_module.PRUNE_EVERY + 1)
    assert not stale.exists()


def _hammer(directory: str, worker: int) -> None:
    store = Cache(Path(directory), build="b")
    for i in range(40):
        store.put("ab" * 32, f"w{worker}-{i % 3}", [_diagnostic(message=f"{worker}-{i}")])
        store.get("ab" * 32, f"w{(worker + 1) % 4}-0", "p")


def test_concurrent_writers_never_leave_a_torn_entry(tmp_path: Path) -> None:
    tmp_path = tmp_path / "cache"  # created by the racing writers: one folder for all
    context = multiprocessing.get_context("fork" if os.name == "posix" else None)
    workers = [context.Process(target=_hammer, args=(str(tmp_path), w)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    [entry] = _entries(tmp_path)
    document = json.loads(entry.read_bytes())  # whole, valid JSON
    assert document["content"] == "ab" * 32
    assert 1 <= len(document["entries"]) <= cache_module.KEYS_PER_CONTENT
    assert not [p for p in tmp_path.rglob("*.tmp")]


# The stat index: unchanged files are not even read -------------------------------------------
@pytest.fixture
def trusting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust files modified just now: a test cannot wait out the racy window (and cannot set
    a file's change time back, which the window is measured on)."""
    monkeypatch.setattr(cache_module.StatIndex, "RACY_SECONDS", 0.0)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from ema_lint import runner

    seen: list[str] = []
    real = runner.read_source

    def counting(path: Path) -> bytes:
        seen.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(runner, "read_source", counting)
    return seen


def test_unchanged_files_are_not_read_again(
    run, project: Path, reads: list[str], trusting: None
) -> None:
    (project / "a.py").write_text(BAD)
    (project / "b.py").write_text("x = 1\n")
    cold = run("-j1", ".", cwd=project)
    assert sorted(reads) == ["a.py", "a.py", "b.py"]  # the parent, then the engine step
    reads.clear()
    warm = run("-j1", ".", cwd=project)
    assert reads == [] and (warm.code, warm.out) == (cold.code, cold.out)
    # Another rule set has another pre-filter: its verdicts are not the recorded ones.
    only = run("-j1", "--select", "EMA101", ".", cwd=project)
    assert only.code == 1 and sorted(reads) == ["a.py", "a.py", "b.py"]
    reads.clear()
    # Back to the first: b.py's recorded verdict is the other filter's, so it is read again;
    # a.py is unchanged and its content is known, so its findings come from the cache unread.
    assert run("-j1", ".", cwd=project).out == cold.out
    assert sorted(reads) == ["b.py"]


_PLAIN_HELPER = """
class Smoother:
    def __init__(self, model, rate):
        self.rate = rate

    def update(self, model):
        pass
"""

_AVERAGING_HELPER = """
import copy


class Smoother:
    def __init__(self, model, rate):
        self.rate = rate
        self.shadow = copy.deepcopy(model)

    def update(self, model):
        with torch.no_grad():
            for s, p in zip(self.shadow.parameters(), model.parameters()):
                s.mul_(self.rate).add_(p, alpha=1 - self.rate)
"""

_IMPORTER = """from tools import Smoother

smoother = Smoother(net, 0.9)
for x in loader:
    net(x).sum().backward()
    opt.step()
    smoother.update(net)
"""


def test_a_skipped_file_is_checked_again_once_a_module_it_imports_changes(
    run, project: Path, reads: list[str], trusting: None
) -> None:
    """The pre-filter skipped train.py (its bytes name no averaging API) because the module
    it imports held nothing about averaging; once that module gains an EMA class, the
    remembered skip no longer stands."""
    (project / "tools.py").write_text(_PLAIN_HELPER)
    (project / "train.py").write_text(_IMPORTER)
    assert run("-j1", "train.py", cwd=project).code == 0
    reads.clear()
    assert run("-j1", "train.py", cwd=project).code == 0
    assert reads == []  # unchanged, with an unchanged import: the skip is remembered
    (project / "tools.py").write_text(_AVERAGING_HELPER)
    again = run("-j1", "train.py", cwd=project)
    assert again.code == 1 and "EMA101" in again.out and "defined in tools.py" in again.out


def test_a_rewrite_with_the_same_size_and_time_is_still_seen(
    run, project: Path, reads: list[str], trusting: None
) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    assert run("-j1", "train.py", cwd=project).code == 1
    before = path.stat()
    path.write_text(BAD.replace("=0.99)", "=.999)"))  # same length, no finding
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same mtime
    assert path.stat().st_size == before.st_size
    reads.clear()
    assert run("-j1", "train.py", cwd=project).code == 0  # the change time gave it away
    assert reads


def test_files_modified_just_now_are_not_trusted(run, project: Path, reads: list[str]) -> None:
    """Written, then read within the file system's timestamp granularity: a second write in
    the same tick could keep the signature, so the file is read again next time."""
    (project / "train.py").write_text(BAD)
    run("-j1", "train.py", cwd=project)
    reads.clear()
    run("-j1", "train.py", cwd=project)
    assert reads == ["train.py"]


def test_a_corrupt_stat_index_is_ignored(run, project: Path, trusting: None) -> None:
    (project / "train.py").write_text(BAD)
    cold = run("-j1", "train.py", cwd=project)
    [index] = list((project / ".ema_lint_cache").rglob(cache_module.StatIndex.NAME))
    for garbage in (b"{", b'{"format": 1, "entries": {"x": 3}}', b"[1, 2]"):
        index.write_bytes(garbage)
        again = run("-j1", "train.py", cwd=project)
        assert (again.code, again.out) == (cold.code, cold.out)
    absolute = str((project / "train.py").resolve())
    index.write_bytes(json.dumps({"format": 1, "entries": {absolute: [[1], 5]}}).encode())
    assert run("-j1", "train.py", cwd=project).out == cold.out


def test_stat_index_verdicts_stay_sound_under_a_fix(run, project: Path, trusting: None) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    run("-j1", "train.py", cwd=project)
    fixed = run("-j1", "--fix", "--unsafe-fixes", "train.py", cwd=project)
    assert fixed.code == 0
    after = run("-j1", "--unsafe-fixes", "train.py", cwd=project)
    assert after.code == 0 and "All checks passed!" in after.out


def test_portable_drops_only_the_node_edits() -> None:
    import dataclasses

    import libcst as cst

    from ema_lint.cache import portable
    from ema_lint.diagnostics import Edit

    node = cst.Name("x")
    d = _diagnostic(fix=Fix(Applicability.SAFE, (Edit.replace(node, cst.Name("y")),), "t"))
    [carried] = portable([d])
    assert carried.fix is not None and carried.fix.edits == ()
    assert (carried.fix.applicability, carried.fix.title) == (Applicability.SAFE, "t")
    for field in dataclasses.fields(d):
        if field.name != "fix":
            assert getattr(carried, field.name) == getattr(d, field.name), field.name
    plain = _diagnostic(fix=None)
    assert portable([plain]) == [plain]
