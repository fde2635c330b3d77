"""The results cache keeps, with each result, the project files its lint read: a result
counts only while they are unchanged; related locations survive the round trip."""

from __future__ import annotations

from pathlib import Path

from ema_lint import dependencies
from ema_lint.cache import Cache
from ema_lint.diagnostics import Diagnostic, Position, Related


def _finding() -> Diagnostic:
    return Diagnostic(
        "EMA101",
        "ema-decay-out-of-range",
        "EMA decay 0.9 (ModelEMA, defined in tools/ema.py)",
        "train.py",
        Position(6, 33),
        Position(6, 36),
        related=(Related("/p/tools/ema.py", 7, "ModelEMA, defined in tools/ema.py"),),
    )


def test_a_result_is_stale_once_a_file_it_read_changes(tmp_path: Path) -> None:
    helper = tmp_path / "ema.py"
    helper.write_text("class ModelEMA: ...\n")
    cache = Cache(tmp_path / "cache", build="test")
    used = {str(helper): dependencies.digest(str(helper))}
    cache.put("ab" * 32, "key", [_finding()], used)
    [found] = cache.get("ab" * 32, "key", "train.py")
    assert found.related == _finding().related
    assert found.message == _finding().message
    helper.write_text("class ModelEMA:\n    pass\n")
    assert cache.get("ab" * 32, "key", "train.py") is None
    helper.unlink()
    assert cache.get("ab" * 32, "key", "train.py") is None


def test_a_result_without_dependencies_is_served_as_before(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache", build="test")
    cache.put("cd" * 32, "key", [])
    assert cache.get("cd" * 32, "key", "model.py") == []


def test_recorded_reads_are_taken_once() -> None:
    dependencies.record("some/file.py", {"/p/ema.py": "0" * 64})
    assert dependencies.take("some/file.py") == {"/p/ema.py": "0" * 64}
    assert dependencies.take("some/file.py") == {}
