"""The Reward sandbox checks gold answers evenly, in a real browser: "$1,000" is read as 1000 (a correct 1000 gets
check_answer's exact +5, it got -4.5 "not a plain number"), "3/4" is refused with the fix while a reward compares
decimals, and an error hides the scores table (its empty frame showed a placeholder headed "1 | 2 | 3").

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_sandbox_gold_browser.py
"""

from __future__ import annotations

import pytest

from conftest import TIMEOUT_MS
from test_sandbox_tab import WORK, open_sandbox, paste_group, wait_for_table

expect = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=TIMEOUT_MS)


def test_a_gold_with_a_currency_sign_and_thousands_is_read_as_its_number(page):
    sandbox = open_sandbox(page)
    paste_group(sandbox, [WORK + "<SOLUTION>1000</SOLUTION>", WORK + "<SOLUTION>999</SOLUTION>"], "$1,000")
    # the completions' scores against the gold of before show first (each edit is scored in turn): wait for the
    # near miss, which only a gold read as 1000 gives (a gold not read as a number gives every row -4.5)
    table = wait_for_table(sandbox, lambda t: (t.get("check_answer") or [None, None])[1:] == [2.0])
    assert table["check_answer"] == [5.0, 2.0], table  # the exact answer (+5), not "not a plain number" (-4.5)


def test_a_fraction_gold_is_refused_with_the_fix_and_no_placeholder_table(page):
    sandbox = open_sandbox(page)
    paste_group(sandbox, [WORK + "<SOLUTION>0.75</SOLUTION>"], "3/4")
    report = page.locator("#sandbox-report")
    expect(report).to_contain_text("'3/4' is not a decimal number")
    expect(report).to_contain_text("3/4 -> 0.75")
    expect(page.locator("#sandbox-table")).to_be_hidden()
    assert "1\n2\n3" not in sandbox.inner_text()


def test_the_format_tags_editor_sits_beside_the_report_it_changes(page):
    """The editor sat at the bottom of the left column while its result or error showed at the top right: editing a
    tag, the report that answers it must be on the same (laptop) screen."""
    page.set_viewport_size({"width": 1280, "height": 800})
    sandbox = open_sandbox(page)
    page.get_by_text("Format tags", exact=True).click()
    box = sandbox.get_by_role("textbox", name="solution_start")
    box.fill("")
    report = page.locator("#sandbox-report")
    expect(report).to_contain_text("Error")
    for element in (box, report):
        element_box = element.bounding_box()
        assert element_box and 0 <= element_box["y"] < 800, element_box  # both in view, no scrolling
