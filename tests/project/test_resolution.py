"""Module resolution: the file an import names, as Python finds it when the code runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ema_lint.analysis.project import resolution
from ema_lint.analysis.project.resolution import module_for_path, resolve


@pytest.fixture(autouse=True)
def _fresh() -> None:
    resolution.clear()


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_relative_imports_resolve_from_the_package(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "setup.py": "",
            "pkg/__init__.py": "",
            "pkg/nn.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/sub/train.py": "",
            "pkg/utils/__init__.py": "",
        },
    )
    importer = module_for_path(str(tmp_path / "pkg/sub/train.py"))
    assert importer.name == "pkg.sub.train"
    found = resolve(importer, "..nn")
    assert found is not None and found.path == str(tmp_path / "pkg/nn.py")
    assert found.name == "pkg.nn"
    assert resolve(importer, "..utils").path == str(tmp_path / "pkg/utils/__init__.py")
    assert resolve(importer, ".missing") is None
    assert resolution.absolute_name(importer, "..nn") == "pkg.nn"
    # Above the top package: not importable.
    assert resolution.absolute_name(importer, "....nn") is None


def test_absolute_imports_of_the_project_against_its_roots(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            ".git": "",
            "tools/train.py": "",
            "tools/helpers.py": "",  # the script's own folder
            "utils/__init__.py": "",
            "utils/ema.py": "",  # the project root
            "src/mylib/__init__.py": "",
            "src/mylib/averaging.py": "",  # a src layout
        },
    )
    importer = module_for_path(str(tmp_path / "tools/train.py"))
    assert resolve(importer, "helpers").path == str(tmp_path / "tools/helpers.py")
    assert resolve(importer, "utils.ema").path == str(tmp_path / "utils/ema.py")
    assert resolve(importer, "mylib.averaging").path == str(tmp_path / "src/mylib/averaging.py")
    # The standard library and third-party packages stay with the API table.
    assert resolve(importer, "os") is None
    assert resolve(importer, "timm.utils") is None


def test_a_src_setting_names_more_roots(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pyproject.toml": '[tool.ema-lint]\nsrc = ["code"]\n',
            "code/helpers/ema.py": "",
            "scripts/train.py": "",
        },
    )
    importer = module_for_path(str(tmp_path / "scripts/train.py"))
    assert resolve(importer, "helpers.ema").path == str(tmp_path / "code/helpers/ema.py")


def test_the_package_chain_gives_the_top_as_a_root(tmp_path: Path) -> None:
    # No marker at all: a package inside a plain folder still resolves its own modules.
    _write(tmp_path, {"app/__init__.py": "", "app/engine.py": "", "app/ema.py": ""})
    importer = module_for_path(str(tmp_path / "app/engine.py"))
    assert resolve(importer, "app.ema").path == str(tmp_path / "app/ema.py")
    # A module never resolves to itself.
    assert resolve(module_for_path(str(tmp_path / "app/ema.py")), "ema") is None
