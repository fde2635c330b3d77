"""Install paths that work: pre-commit revs that exist, rule pages readable as published."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ema_lint import docs, registry
from tests.fixture_cases import ROOT

_REV = re.compile(r"^\s*rev:\s*(\S+)", re.MULTILINE)
_DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _revs() -> list[tuple[str, str]]:
    found = []
    for path in _DOCUMENTS:
        for rev in _REV.findall(path.read_text(encoding="utf-8")):
            found.append((path.relative_to(ROOT).as_posix(), rev))
    return found


def test_the_docs_show_a_pre_commit_rev() -> None:
    assert any(doc == "README.md" for doc, _ in _revs())


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)
def test_every_pre_commit_rev_exists_in_the_repository() -> None:
    tags = subprocess.run(
        ["git", "tag"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for doc, rev in _revs():
        if rev in tags:
            continue
        # A branch (main, on a fresh clone too) or a full commit hash.
        assert rev == "main" or re.fullmatch(r"[0-9a-f]{40}", rev), f"{doc}: rev {rev!r}"
        if rev != "main":
            subprocess.run(["git", "cat-file", "-e", f"{rev}^{{commit}}"], cwd=ROOT, check=True)


def test_rule_pages_show_each_plot_once_and_no_generator_note() -> None:
    for rule in registry.all_rules():
        text = docs.page(rule, ROOT)
        images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
        assert len(images) == len(set(images)), f"{rule.code}: a plot shown twice"
        assert "do not edit" not in text.lower(), f"{rule.code}: the generator's note"


def test_installing_from_git_and_a_checkout_is_documented() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "git+https://" in readme and "pip install /path/to/ema-lint" in readme
