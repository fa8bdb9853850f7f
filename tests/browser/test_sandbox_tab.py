"""The Reward sandbox in a real browser: a group that cannot learn, then one that can.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_sandbox_tab.py

Elements are found by their visible labels, as a user finds them. Screenshots land in artifacts/screenshots/ (the
e2e-sandbox-*.png regions are docs/guide.md's: `python scripts/docs_images.py`).
"""

from __future__ import annotations

import re
import time

from test_e2e_flow import region_screenshot

WORK = "<start_working_out>6 x 7 = 42<end_working_out>"
# Three completions that never write the <SOLUTION> tag: every reward scores them alike, the seed's story.
FLAT_GROUP = ["I think the answer is 42.", "solution: 42", "SOL 42"]
# The band docs/guide.md shows: the group's report, the boxes pasted into and the first completion's card.
GUIDE_REGION = ("#sandbox-report", "#sandbox-answer", "#sandbox-details .sandbox-card")
# A right answer, a near miss (within 10%: check_answer's +2.0 band) and a clean wrong answer.
GRADED_GROUP = [WORK + "<SOLUTION>42</SOLUTION>", WORK + "<SOLUTION>41</SOLUTION>",
                "<start_working_out>6 + 7 = 13<end_working_out><SOLUTION>13</SOLUTION>"]


def open_sandbox(page):
    page.get_by_role("tab", name="Reward sandbox").click()
    return page.get_by_role("tabpanel").filter(has=page.get_by_role("textbox", name=re.compile(r"^gold answer")))


def paste_group(sandbox, completions: list[str], answer: str) -> None:
    sandbox.get_by_role("textbox", name=re.compile(r"^completions")).fill("\n---\n".join(completions))
    sandbox.get_by_role("textbox", name=re.compile(r"^gold answer")).fill(answer)


def read_table(sandbox) -> dict[str, list[float]]:
    """The scores table as {column: values}, read from the rendered grid."""
    grid = sandbox.get_by_role("grid", name=re.compile(r"^scores"))
    headers = [h.strip() for h in grid.get_by_role("columnheader").all_inner_texts()]
    rows = [[c.strip() for c in row.get_by_role("gridcell").all_inner_texts()] for row in grid.get_by_role("row").all()]
    rows = [r for r in rows if r]  # the header row has no grid cells
    return {h: [float(r[i]) for r in rows if len(r) == len(headers)] for i, h in enumerate(headers)}


def wait_for_table(sandbox, done, timeout_s: float = 30.0) -> dict[str, list[float]]:
    """Poll until the live update has rendered a table for which done(table) holds, read the same twice in a row
    (a grid caught mid-render mixes the rows of two tables)."""
    deadline, table, last = time.monotonic() + timeout_s, {}, None
    while time.monotonic() < deadline:
        try:
            table = read_table(sandbox)
            if table == last and done(table):
                return table
            last = table
        except ValueError:
            last = None  # a cell caught mid-render
        time.sleep(0.2)
    raise AssertionError(f"the scores table never reached the expected state; last seen: {table}")


def test_zero_variance_warning_then_advantages(page, screenshot, expect):
    sandbox = open_sandbox(page)
    report = sandbox.locator("#sandbox-report")

    paste_group(sandbox, FLAT_GROUP, "42")
    table = wait_for_table(sandbox, lambda t: len(t.get("total", [])) == 3 and len(set(t["total"])) == 1)
    assert table["advantage"] == [0.0, 0.0, 0.0]
    assert {"match_format_approximately", "check_answer", "check_numbers"} <= set(table)
    expect(report).to_contain_text("Zero variance")
    expect(report).to_contain_text("will not learn")
    screenshot(page, "zero-variance")
    region_screenshot(page, "sandbox-zero-variance", *GUIDE_REGION)

    paste_group(sandbox, GRADED_GROUP, "42")
    table = wait_for_table(sandbox, lambda t: len(t.get("total", [])) == 3 and len(set(t["total"])) == 3)
    # The seed's scores: right 1.5 + 5.0 + 3.5; near miss 1.5 + 2.0 - 1.5; wrong 1.5 - 2.5 - 1.5.
    assert table["total"] == [10.0, 2.0, -2.5]
    right, near, wrong = table["advantage"]
    assert right > near > wrong and right > 0 > wrong
    assert abs(right + near + wrong) < 1e-3  # advantages are centred on the group mean
    expect(report).not_to_contain_text("Zero variance")
    screenshot(page, "advantages")
    region_screenshot(page, "sandbox-advantages", *GUIDE_REGION)


def test_custom_reward_in_the_sandbox(custom_reward_page, screenshot, expect):
    page = custom_reward_page
    sandbox = open_sandbox(page)
    paste_group(sandbox, GRADED_GROUP, "42")
    wait_for_table(sandbox, lambda t: t.get("total") == [10.0, 2.0, -2.5])

    sandbox.get_by_text("Custom reward (Python)").click()
    sandbox.get_by_role("button", name="Insert an example").click()
    # The example pays 1.0 when the last number equals the gold answer; it joins the total with weight 1.
    table = wait_for_table(sandbox, lambda t: len(t.get("custom", [])) == 3)
    assert table["custom"] == [1.0, 0.0, 0.0]
    assert table["total"] == [11.0, 2.0, -2.5]
    screenshot(page, "custom-reward")

    # A hostile reward: the sandbox times it out, the page says so, and the app keeps answering.
    editor = sandbox.locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text("def reward(completions, answer, **kwargs):\n    while True:\n        pass\n")
    expect(sandbox.locator("#sandbox-report")).to_contain_text("timed out")
    screenshot(page, "custom-reward-timeout")
    sandbox.get_by_role("button", name="Insert an example").click()
    assert wait_for_table(sandbox, lambda t: len(t.get("custom", [])) == 3)["custom"] == [1.0, 0.0, 0.0]
