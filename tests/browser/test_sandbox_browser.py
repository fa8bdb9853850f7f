"""The Reward sandbox's design check in a real browser (test_sandbox_tab.py covers scores and zero variance).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_sandbox_browser.py
"""

from __future__ import annotations

import re

from playwright.sync_api import expect


def test_design_warning_names_the_fix_and_clears_when_it_is_applied(page, screenshot):
    page.get_by_role("tab", name="Reward sandbox").click()
    report = page.locator("#sandbox-report")
    # The example group holds the gamed completion; the seed set's ordering is called out, with the fix.
    expect(report).to_contain_text("keeps writing after the closing tag")
    expect(report).to_contain_text("replace check_answer with check_answer_strict_nomatch")
    screenshot(page, "design-warning")

    # Tags in messages are escaped, not swallowed as HTML: the reason must show <SOLUTION> literally.
    page.locator("#sandbox-completions textarea").fill("solution: 42\n---\nSOL 42")
    expect(report).to_contain_text("no <SOLUTION> tag")

    enabled = page.locator("#sandbox-enabled")
    enabled.get_by_label("check_answer", exact=True).uncheck()
    enabled.get_by_label("check_answer_strict_nomatch").check()
    expect(report).to_contain_text(re.compile("Reward design check: no completion without a clean answer"))
    expect(report).not_to_contain_text("keeps writing after the closing tag")
    expect(page.locator("#sandbox-table")).to_contain_text("check_answer_strict_nomatch")
    screenshot(page, "design-fixed")
    # the long reward name does not push the last columns out of view or cut their names
    table = page.locator("#sandbox-table").bounding_box()
    for name in ("total", "advantage"):
        header = page.locator("#sandbox-table th", has_text=name).first
        box = header.bounding_box()
        assert box["x"] + box["width"] <= table["x"] + table["width"] + 1, (name, box, table)
        assert header.evaluate("h => [h, ...h.querySelectorAll('*')].every(e => e.scrollWidth <= e.clientWidth + 1)"), \
            f"the {name} header is cut"
