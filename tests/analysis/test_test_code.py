"""Unit-test code: values chosen for a test are not judged as training settings."""

from __future__ import annotations

import pytest

import ema_lint
from ema_lint.analysis.syntax.test_code import is_test_module

UNIT_TEST = """\
import torch
from timm.utils import ModelEmaV2


def test_two_updates():
    model = torch.nn.Linear(2, 2)
    ema = ModelEmaV2(model, decay=0.9)
    ema.update(model)
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("tests/test_ema.py", True),
        ("test_ema.py", True),
        ("pkg/ema_test.py", True),
        ("conftest.py", True),
        ("tests/helpers.py", True),
        ("repo/testing/utils.py", True),
        ("test.py", False),  # an evaluation script in many training repos
        ("train.py", False),
        ("contest_ema.py", False),
        ("latest_test_run/train.py", False),
    ],
)
def test_test_modules_by_pytest_naming(path: str, expected: bool) -> None:
    assert is_test_module(path) is expected


def test_value_in_a_test_function_is_not_judged() -> None:
    assert ema_lint.check(UNIT_TEST, path="tests/test_ema.py", select=["EMA1"]) == []


def test_same_code_outside_a_test_module_is_judged() -> None:
    (finding,) = ema_lint.check(UNIT_TEST, path="train.py", select=["EMA1"])
    assert finding.code == "EMA101"


def test_judge_tests_option_turns_it_back_on() -> None:
    found = ema_lint.check(
        UNIT_TEST, path="tests/test_ema.py", options={"EMA101": {"judge-tests": True}}
    )
    assert [d.code for d in found] == ["EMA101"]
