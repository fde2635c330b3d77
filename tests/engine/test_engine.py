"""The engine's guarantees, with rules made for the test: crash isolation, fix safety."""

from __future__ import annotations

import libcst as cst

from ema_lint import engine, registry
from ema_lint.diagnostics import Edit, Fix
from ema_lint.rule import Rule

SOURCE = "from timm.utils import ModelEmaV2\n\nema = ModelEmaV2(model, decay=0.99)\nx = 1\n"


class Crashes(Rule):
    code = "EMA990"
    name = "test-crashes"
    summary = "raises"
    triggers = (b"ModelEmaV2",)

    def visit_Call(self, node: cst.Call) -> None:
        raise ZeroDivisionError("boom")


class BreaksCode(Rule):
    code = "EMA991"
    name = "test-breaks-code"
    summary = "a fix that does not parse"
    triggers = (b"ModelEmaV2",)

    def visit_Integer(self, node: cst.Integer) -> None:
        self.report(node, "integer", Fix.safe("break", Edit.replace(node, cst.Name("lambda"))))


class RenamesX(Rule):
    code = "EMA992"
    name = "test-renames-x"
    summary = "renames x to y (two fixes per pass, then converges)"
    triggers = (b"x",)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == "x":
            self.report(node, "x", Fix.safe("rename", Edit.replace(node, cst.Name("y"))))


class NeverConverges(Rule):
    code = "EMA993"
    name = "test-never-converges"
    summary = "a fix that leaves its finding in place"
    triggers = (b"x",)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == "x":
            self.report(node, "x", Fix.safe("noop", Edit.replace(node, cst.Name("x"))))


def settings(*rules: type[Rule], unsafe: bool = False) -> engine.FileSettings:
    return engine.FileSettings(rules=rules, unsafe_fixes=unsafe)


def test_a_crashing_rule_is_ema902_and_the_others_still_report() -> None:
    ema101 = registry.by_code()["EMA101"]
    found = engine.lint(SOURCE, "t.py", settings(Crashes, ema101))
    codes = sorted(d.code for d in found)
    assert codes == ["EMA101", "EMA902"]
    crash = next(d for d in found if d.code == "EMA902")
    assert "EMA990" in crash.message and "ZeroDivisionError: boom" in crash.message


def test_a_fix_that_breaks_the_file_is_dropped_and_reported() -> None:
    outcome = engine.fix(SOURCE, "t.py", settings(BreaksCode))
    assert outcome.fixed == SOURCE
    assert [d.code for d in outcome.diagnostics if d.code == "EMA903"]
    assert any("EMA991" in d.message for d in outcome.diagnostics if d.code == "EMA903")


def test_fix_loop_applies_every_fix_and_converges() -> None:
    source = "x = x + 1\nprint(x)\n"
    outcome = engine.fix(source, "t.py", settings(RenamesX))
    assert outcome.fixed == "y = y + 1\nprint(y)\n"
    assert outcome.applied == 3


def test_a_fix_that_changes_nothing_does_not_loop() -> None:
    outcome = engine.fix("x = 1\n", "t.py", settings(NeverConverges))
    assert outcome.fixed == "x = 1\n"
    assert [d.code for d in outcome.diagnostics] == ["EMA993"]


def test_prefilter_skips_files_without_triggers() -> None:
    class Always(Rule):
        code = "EMA994"
        name = "test-always"
        summary = "reports every module"
        triggers = (b"never-present-token",)

        def finish(self) -> None:
            self.report(self.ctx.module.body[0], "module")

    assert engine.lint("x = 1\n", "t.py", settings(Always)) == []
    unfiltered = engine.FileSettings(rules=(Always,), prefilter=False)
    assert len(engine.lint("x = 1\n", "t.py", unfiltered)) == 1


def test_bytes_keep_bom_cookie_and_line_endings() -> None:
    ema101 = registry.by_code()["EMA101"]
    for prefix, newline, encoding in (
        (b"\xef\xbb\xbf", b"\r\n", "utf-8"),
        (b"# -*- coding: latin-1 -*-\n", b"\n", "latin-1"),
    ):
        body = SOURCE.replace("x = 1", "x = 'caf\u00e9'").encode(encoding)
        data = prefix + body.replace(b"\n", newline)
        outcome = engine.fix(data, "t.py", settings(ema101, unsafe=True))
        assert outcome.fixed == data.replace(b"0.99)", b"0.999)")


def test_positions_are_one_based_and_cover_the_node() -> None:
    ema101 = registry.by_code()["EMA101"]
    [d] = engine.lint(SOURCE, "t.py", settings(ema101))
    assert (d.start.line, d.start.column, d.end.line, d.end.column) == (3, 31, 3, 35)


def test_tabs_and_unicode_columns_count_characters() -> None:
    ema101 = registry.by_code()["EMA101"]
    source = "from timm.utils import ModelEmaV2\nif True:\n\té = ModelEmaV2(m, decay=0.99)\n"
    [d] = engine.lint(source, "t.py", settings(ema101))
    assert (d.line, d.column) == (3, 26)


def test_prefilter_trigger_groups_are_conjunctions() -> None:
    from ema_lint.prefilter import PreFilter

    class Grouped(Rule):
        code = "EMA995"
        name = "test-grouped"
        summary = "needs two kinds of evidence"
        triggers = (b"deepcopy",)
        trigger_groups = (((b"parameters", b"state_dict"), (b"ema", b"EMA")),)

    prefilter = PreFilter([Grouped])
    assert prefilter.matches(b"m = deepcopy(model)")
    assert prefilter.matches(b"for e in ema.parameters(): pass")
    assert prefilter.matches("for v in model_EMA.state_dict().values(): pass")
    assert not prefilter.matches(b"opt = SGD(model.parameters())")
    assert not prefilter.matches("ema = 1")

    class Implied(Rule):
        code = "EMA996"
        name = "test-implied"
        summary = "a group implied by a token"
        triggers = (b"param",)
        trigger_groups = (((b"parameters", b"named_parameters"), (b"ema",)),)

    assert PreFilter([Implied]).groups == ()
