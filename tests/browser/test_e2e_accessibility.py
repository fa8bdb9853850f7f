"""Accessibility basics in a real browser: every control has an accessible name, the app works from the
keyboard, and its text stays readable in dark mode.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_e2e_accessibility.py

Names come from chromium's own accessibility tree (CDP `Accessibility.getFullAXTree`), i.e. what a screen
reader is given, not from our guess at how labels map to inputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_e2e_flow import region_screenshot
from test_sandbox_tab import GRADED_GROUP, open_sandbox, paste_group, wait_for_table

TABS = ["Training", "Reward sandbox", "Chat", "Evaluate"]
CONTROL_ROLES = {"button", "textbox", "searchbox", "combobox", "listbox", "checkbox", "radio", "slider",
                 "spinbutton", "switch", "tab", "menuitem", "option"}
MIN_CONTRAST = 3.0  # WCAG AA for large text / UI parts; body text should do better, nothing may do worse

# For each visible element that directly holds text: its colour against the first opaque background
# behind it (walking up the ancestors), as a WCAG contrast ratio. Returns the worst offenders.
CONTRAST_JS = """(minRatio) => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const background = (el) => { for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor); if (c && c[3] > 0.5) return c; }
    return parse(getComputedStyle(document.body).backgroundColor) || [255, 255, 255, 1]; };
  const bad = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].filter((n) => n.nodeType === 3 && n.textContent.trim()).map((n) => n.textContent.trim()).join(' ');
    if (!own) continue;
    const style = getComputedStyle(el); const box = el.getBoundingClientRect();
    if (style.visibility !== 'visible' || style.display === 'none' || box.width === 0 || box.height === 0
        || parseFloat(style.opacity) < 0.5 || el.closest('[aria-hidden="true"], svg, canvas, .cm-editor')) continue;
    const fg = parse(style.color); if (!fg || fg[3] < 0.5) continue;
    const l1 = lum(fg), l2 = lum(background(el));
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < minRatio) bad.push({text: own.slice(0, 60), tag: el.tagName, color: style.color,
                                     ratio: Math.round(ratio * 100) / 100});
  }
  return bad.slice(0, 20);
}"""


def unnamed_controls(page) -> list[str]:
    """Controls in chromium's accessibility tree that a screen reader would announce without a name."""
    cdp = page.context.new_cdp_session(page)
    try:
        nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
        bad = []
        for node in nodes:
            role = (node.get("role") or {}).get("value", "")
            if node.get("ignored") or role not in CONTROL_ROLES:
                continue
            if str((node.get("name") or {}).get("value", "")).strip():
                continue
            described = cdp.send("DOM.describeNode", {"backendNodeId": node["backendDOMNodeId"]})["node"]
            attrs = dict(zip(described.get("attributes", [])[::2], described.get("attributes", [])[1::2]))
            bad.append(f"{role} <{described['localName']} id={attrs.get('id')!r} class={attrs.get('class')!r}>")
        return bad
    finally:
        cdp.detach()


def show_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()
    page.wait_for_timeout(300)  # let the tab's components mount
    # open every accordion, so the controls inside are checked too
    for accordion in page.locator("button.label-wrap:not(.open)").all():
        if accordion.is_visible():
            accordion.click()
    page.wait_for_timeout(300)


@pytest.mark.parametrize("tab", TABS)
def test_every_control_has_an_accessible_name(page, tab):
    show_tab(page, tab)
    assert page.get_by_role("tab", name=tab).get_attribute("aria-selected") == "true"
    bad = unnamed_controls(page)
    assert not bad, f"{tab} tab: controls without an accessible name (give them label=...):\n" + "\n".join(bad)


def test_keyboard_reaches_start_and_switches_tabs(page, expect):
    """Tab order: from the top of the page, Tab alone reaches the Start button and Enter on a tab opens it."""
    page.locator("body").click(position={"x": 5, "y": 5})
    for _ in range(80):  # the recipe form has a few dozen fields; the button must come after them, not never
        page.keyboard.press("Tab")
        focused = page.evaluate("document.activeElement && document.activeElement.innerText || ''").strip()
        if focused == "Start":
            break
    else:
        pytest.fail("80 presses of Tab never focused the Start button: it is out of the keyboard's reach")

    sandbox = page.get_by_role("tab", name="Reward sandbox")
    sandbox.focus()
    page.keyboard.press("Enter")
    expect(sandbox).to_have_attribute("aria-selected", "true")


MAX_TABS_TO_START = 5  # it took 21 presses: the tabs, the screens and every section of the recipe form came first


def focused_text(page) -> str:
    return page.evaluate("document.activeElement && document.activeElement.innerText || ''").strip()


@pytest.mark.parametrize("shown_tab", ["Training", "Chat"])
def test_start_is_a_few_key_presses_from_page_load(page, expect, shown_tab):
    """From a freshly loaded page (and from another tab), a few presses of Tab reach the "Skip to Start" link, which
    shows itself and whose Enter focuses Start: a keyboard user does not walk the whole recipe form first."""
    page.get_by_role("tab", name=shown_tab).click()
    page.locator("body").click(position={"x": 5, "y": 5})  # the focus back at the top, as on page load
    for presses in range(1, MAX_TABS_TO_START + 1):
        page.keyboard.press("Tab")
        if focused_text(page) in ("Start", "Skip to Start"):
            break
    else:
        pytest.fail(f"{MAX_TABS_TO_START} presses of Tab reached neither Start nor a skip link to it")
    if focused_text(page) == "Skip to Start":
        link = page.get_by_role("link", name="Skip to Start")
        assert link.bounding_box()["y"] >= 0, "the focused skip link stays off screen: a sighted keyboard user misses it"
        page.keyboard.press("Enter")
    start = page.get_by_role("button", name="Start", exact=True)
    expect(start).to_be_focused()
    expect(start).to_be_in_viewport()


def test_dark_mode_text_is_readable(request, browser, app_url, screenshot):
    # tests/browser/conftest.py's helpers (asked of pytest: `import conftest` may find tests/conftest.py)
    harness = request.config.pluginmanager.get_plugin(str(Path(__file__).with_name("conftest.py")))
    context, page = harness.open_page(browser, app_url + "?__theme=dark")
    try:
        assert page.evaluate("document.body.classList.contains('dark')"), "?__theme=dark did not switch the theme"
        problems = {}
        for tab in TABS:
            show_tab(page, tab)
            if tab == "Reward sandbox":  # render a group: its highlights are our own HTML
                page.locator("#sandbox-completions textarea").fill(
                    "<start_working_out>6 x 7 = 42<end_working_out><SOLUTION>42</SOLUTION>\n---\nsolution 41")
                page.locator("#sandbox-answer textarea, #sandbox-answer input").first.fill("42")
                page.locator("mark").first.wait_for()
            screenshot(page, f"dark-{tab.lower().replace(' ', '-')}")
            if tab == "Reward sandbox":  # the README's picture: the title and tabs down to the completions' cards
                region_screenshot(page, "sandbox-dark", "h1", "#sandbox-details")
            bad = page.evaluate(CONTRAST_JS, MIN_CONTRAST)
            if bad:
                problems[tab] = bad
        assert not problems, f"text below contrast {MIN_CONTRAST}:1 in dark mode (use theme CSS variables): {problems}"
    finally:
        harness.close_page(request, context, page)


def test_a_finished_event_is_announced_in_words(page):
    """Gradio's live region tells a screen reader that an event finished; with its `common.complete` key missing
    from the English strings, the raw key was announced (and once seen on the page) after every click."""
    page.evaluate("""() => { window.__announced = [];
      new MutationObserver(() => document.querySelectorAll('[aria-live="polite"][aria-atomic="true"]').forEach(
        (el) => el.textContent.trim() && window.__announced.push(el.textContent.trim())))
        .observe(document.body, {subtree: true, childList: true, characterData: true}); }""")
    sandbox = open_sandbox(page)
    paste_group(sandbox, GRADED_GROUP, "42")
    wait_for_table(sandbox, lambda t: t.get("total") == [10.0, 2.0, -2.5])
    page.wait_for_function("() => window.__announced.some((text) => text !== 'Loading')", timeout=20_000)
    announced = page.evaluate("() => window.__announced")
    assert not [text for text in announced if "common." in text], announced
    assert "Complete" in announced, announced
