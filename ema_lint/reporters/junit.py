"""JUnit XML, for CI systems that show test reports (Jenkins, GitLab, Azure Pipelines).

One test suite per file with findings, one failing test case per finding; a run without
findings is one passing test case, so the report is never empty. One-line errors
(unreadable paths, configuration) are test cases with an ``<error>``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from itertools import groupby
from typing import TextIO

from .base import RunResult, position_text

# XML 1.0 cannot hold these characters at all, not even as references: a message quoting
# one (an ESC in a source string) would make the report unreadable to every parser.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def document(result: RunResult) -> ET.Element:
    root = ET.Element("testsuites", name="ema-lint")
    total = failures = errors = 0
    for path, group in groupby(result.diagnostics, key=lambda d: d.path):
        found = list(group)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_xml(path),
            tests=str(len(found)),
            failures=str(len(found)),
            errors="0",
        )
        for d in found:
            case = ET.SubElement(
                suite,
                "testcase",
                name=f"{d.code} ({d.name}) at {position_text(d)}",
                classname=_xml(path),
                file=_xml(path),
                line=str(d.line),
            )
            failure = ET.SubElement(case, "failure", message=_xml(d.message), type=d.code)
            failure.text = _xml(f"{path}:{position_text(d)}: {d.code} {d.message}")
        total += len(found)
        failures += len(found)
    if result.errors:
        suite = ET.SubElement(
            root,
            "testsuite",
            name="ema-lint errors",
            tests=str(len(result.errors)),
            failures="0",
            errors=str(len(result.errors)),
        )
        for error in result.errors:
            case = ET.SubElement(suite, "testcase", name=_xml(error), classname="ema-lint")
            ET.SubElement(case, "error", message=_xml(error)).text = _xml(error)
        total += len(result.errors)
        errors += len(result.errors)
    if total == 0:
        suite = ET.SubElement(root, "testsuite", name="ema-lint", tests="1", failures="0")
        suite.set("errors", "0")
        ET.SubElement(suite, "testcase", name="no findings", classname="ema-lint")
        total = 1
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    return root


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    root = document(result)
    ET.indent(root)
    stream.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    stream.write(ET.tostring(root, encoding="unicode"))
    stream.write("\n")
