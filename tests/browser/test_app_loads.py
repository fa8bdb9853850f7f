"""The app opens in a real browser with its three tabs.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_app_loads.py
"""


def test_app_opens_with_its_tabs(page, screenshot):
    assert page.title() == "GRPO Playground"
    tabs = [name.strip() for name in page.get_by_role("tab").all_inner_texts()]
    assert tabs[:3] == ["Training", "Reward sandbox", "Chat"], tabs
    assert screenshot(page, "home").stat().st_size > 10_000  # a real rendering, not a blank page
