"""The fast parse: the same tree as libcst's, and libcst's checks back once it returns."""

import gc

import libcst as cst
import pytest

from ema_lint.analysis.syntax.parsing import parse_module

SOURCE = (
    b"import torch\n\n\nclass EMA:\n"
    b"    def update(self, model):  # keep\n"
    b"        x = (1 - self.decay)\n"
)


def test_same_tree_and_code_as_libcst():
    fast = parse_module(SOURCE)
    assert fast.bytes == SOURCE
    assert fast.deep_equals(cst.parse_module(SOURCE))


def test_syntax_errors_still_raise():
    with pytest.raises(cst.ParserSyntaxError):
        parse_module(b"def f(:\n")


def test_validation_and_collector_restored():
    gc.enable()
    parse_module(SOURCE)
    assert gc.isenabled()
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")  # nodes made outside a parse are validated again
    gc.disable()
    try:
        parse_module(SOURCE)
        assert not gc.isenabled()  # a caller's choice is left as it was
    finally:
        gc.enable()


def test_restored_after_a_failed_parse():
    with pytest.raises(cst.ParserSyntaxError):
        parse_module(b"x = (\n")
    assert gc.isenabled()
    with pytest.raises(cst.CSTValidationError):
        cst.Name("1x")
