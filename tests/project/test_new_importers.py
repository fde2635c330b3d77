"""A helper's verdict depends on the modules that import it: a file that starts importing
a helper (a new file, or one that never spelled the helper's module) and hands it an
averaging object changes the helper's findings. The results cache and the stat index's
skip verdicts must see it on the next run, and a long-lived process (the language server)
must see it once told the file changed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ema_lint import cache as cache_module
from ema_lint import files as files_module
from ema_lint.analysis.project import admission, resolution
from ema_lint.analysis.project import model as project_model

# No averaging word: only a caller that hands it an average makes it worth linting.
ENGINE = textwrap.dedent(
    """
    import torch


    def evaluate(model, loader):
        model.eval()
        return sum(model(x).sum() for x in loader)


    def train_one_epoch(model, loader, optimizer, tracker):
        for images, targets in loader:
            loss = torch.nn.functional.cross_entropy(model(images), targets)
            optimizer.zero_grad()
            loss.backward()
            tracker.update(model)
            optimizer.step()
    """
)
MAIN = textwrap.dedent(
    """
    import torch
    from timm.utils import ModelEmaV2

    from engine import train_one_epoch


    def main(model, loader, epochs):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model_ema = ModelEmaV2(model, decay=0.9998)
        for _ in range(epochs):
            train_one_epoch(model, loader, optimizer, model_ema)
    """
)
# Hands the helper's other function an averaged copy: the helper is linted, and silent.
VALIDATE = textwrap.dedent(
    """
    from timm.utils import ModelEmaV2

    from engine import evaluate


    def validate(model, loader):
        model_ema = ModelEmaV2(model, decay=0.9998)
        return evaluate(model_ema.module, loader)
    """
)
UNRELATED = "import torch\n\n\ndef run(model, x):\n    return model(x)\n"


def _fresh() -> None:
    """What a new process starts with (the command runs once per process)."""
    resolution.clear()
    project_model.forget()
    project_model.STORE.memory.clear()
    admission._READ.clear()


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch):
    # Trust files written just now (a test cannot wait out the racy window).
    monkeypatch.setattr(cache_module.StatIndex, "RACY_SECONDS", 0.0)
    _fresh()
    yield
    _fresh()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / "engine.py").write_text(ENGINE)
    (tmp_path / "other.py").write_text(UNRELATED)
    return tmp_path


def _check(run, tree: Path) -> list[tuple[str, str]]:
    _fresh()
    done = run(
        "check", "--isolated", "--cache-dir", tree / "cache", "-j1", "--exit-zero", ".", cwd=tree
    )
    assert done.code == 0, done.err
    return sorted(
        (line.split(":", 1)[0], line.split()[1])
        for line in done.out.splitlines()
        if ": EMA" in line
    )


def test_a_new_caller_overturns_a_skipped_helper(run, tree: Path) -> None:
    assert _check(run, tree) == []
    assert _check(run, tree) == []  # warm: the helper's skip verdict is remembered
    (tree / "main.py").write_text(MAIN)
    assert _check(run, tree) == [("engine.py", "EMA203")]
    assert _check(run, tree) == [("engine.py", "EMA203")]  # and remembered in turn


def test_a_new_caller_overturns_a_cached_result(run, tree: Path) -> None:
    (tree / "validate.py").write_text(VALIDATE)
    assert _check(run, tree) == []
    assert _check(run, tree) == []
    (tree / "main.py").write_text(MAIN)
    assert _check(run, tree) == [("engine.py", "EMA203")]


def test_an_importer_that_starts_calling_overturns_a_cached_result(run, tree: Path) -> None:
    (tree / "validate.py").write_text(VALIDATE)
    assert _check(run, tree) == []
    # validate.py imported the module already, for another function.
    (tree / "validate.py").write_text(
        VALIDATE.replace("import evaluate", "import evaluate, train_one_epoch")
        + "\n\ndef fit(model, loader, optimizer):\n"
        + "    model_ema = ModelEmaV2(model, decay=0.9998)\n"
        + "    train_one_epoch(model, loader, optimizer, model_ema)\n"
    )
    assert _check(run, tree) == [("engine.py", "EMA203")]


@pytest.mark.parametrize("linted", [True, False], ids=["cached-result", "skip-verdict"])
def test_a_warm_run_reads_only_the_files_changed_since(
    run, tree: Path, monkeypatch: pytest.MonkeyPatch, linted: bool
) -> None:
    # Files written within the margin before a listing are checked again: not here.
    monkeypatch.setattr(admission, "CHANGE_MARGIN", 0.0)
    if linted:  # a caller hands the helper an average: it is linted, its result cached
        (tree / "validate.py").write_text(VALIDATE)
    assert _check(run, tree) == []
    read: list[str] = []
    real = files_module.read_regular

    def counting(path, *args, **kwargs):
        read.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(admission, "read_regular", counting)  # the project model's too
    (tree / "extra.py").write_text(UNRELATED)
    assert _check(run, tree) == []
    # The new file is read to tell it names no helper; the rest of the project is not.
    assert read == ["extra.py"]
    read.clear()
    assert _check(run, tree) == []
    assert read == []  # the helper's entry was renewed: nothing changed since


# A long-lived process (the language server) is told of each changed file ----------------
def test_a_long_lived_process_sees_a_new_importer_once_told(tree: Path) -> None:
    helper = str(tree / "engine.py")
    assert not admission.project_admits(helper, ENGINE)  # the index is built now
    (tree / "main.py").write_text(MAIN)
    assert not admission.project_admits(helper, ENGINE)  # not told yet: the index stands
    change = project_model.file_changed(str(tree / "main.py"))
    assert change is not None and change.listed
    assert project_model.linked(change, helper)
    assert not project_model.linked(change, str(tree / "other.py"))
    assert admission.project_admits(helper, ENGINE)
    assert project_model.file_changed(str(tree / "main.py")) is None  # nothing new since
    (tree / "main.py").unlink()
    change = project_model.file_changed(str(tree / "main.py"))
    assert change is not None and change.listed
    assert not admission.project_admits(helper, ENGINE)


def test_telling_of_one_file_reads_only_that_file(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for number in range(300):
        (tree / f"module_{number}.py").write_text(
            f"import torch\nfrom other import run\n\n\ndef step_{number}(optimizer):\n"
            "    optimizer.step()\n"
        )
    helper = str(tree / "engine.py")
    assert not admission.project_admits(helper, ENGINE)
    project_model.step_helper_names(str(tree))
    read: list[str] = []
    real = files_module.read_regular

    def counting(path, *args, **kwargs):
        read.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(admission, "read_regular", counting)  # the project model's too
    (tree / "main.py").write_text(MAIN)
    assert project_model.file_changed(str(tree / "main.py")) is not None
    assert set(read) == {"main.py"}
    assert admission.project_admits(helper, ENGINE)


def test_a_file_no_walk_lists_stays_out_of_the_index(tree: Path) -> None:
    helper = str(tree / "engine.py")
    assert not admission.project_admits(helper, ENGINE)
    (tree / ".venv").mkdir()
    (tree / ".venv" / "main.py").write_text(MAIN)
    change = project_model.file_changed(str(tree / ".venv" / "main.py"))
    assert change is not None and not change.listed
    assert not admission.project_admits(helper, ENGINE)
