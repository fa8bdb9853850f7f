"""The app opens in a real browser with its four tabs, the Training tab showing its form.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_app_loads.py
"""


def test_app_opens_with_its_tabs(page, screenshot):
    assert page.title() == "GRPO Playground"
    tabs = [name.strip() for name in page.get_by_role("tab").all_inner_texts()]
    assert tabs[:4] == ["Training", "Reward sandbox", "Chat", "Evaluate"], tabs
    # a real rendering: the first tab's controls are on screen, not a blank page
    assert page.get_by_role("button", name="Start", exact=True).is_visible()
    screenshot(page, "home")
