"""Browser tests: Playwright for Python driving Debian's chromium against the real app (tests/conftest.py:app_url).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser

Playwright cannot download its own browsers here (no internet), so we launch Debian's: CHROMIUM_PATH, else
chromium-headless-shell (Chrome's old headless mode, packaged apart since the browser's `--headless` became the full
browser; a page load of the app took 2.0 s of CPU in it against 3.2 s in chromium), else chromium. `bash
scripts/install.sh --test` installs both. Without either, or without playwright, the tests skip locally but FAIL in
CI (CI=true).
Screenshots go to artifacts/screenshots/ (gitignored; CI keeps that folder as artifacts).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_PATH") or next(
    (path for path in ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium") if os.access(path, os.X_OK)),
    "/usr/bin/chromium")
# This network reaches nothing: switch off everything that phones home, or chromium waits on timeouts.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 30_000  # two shared cores: a Gradio round trip can take seconds under load
APP_START_S = 90  # importing gradio alone took 12 s here under load
if os.environ.get("CI", "").lower() == "true":
    # The test files take `expect` through pytest.importorskip, which would skip them all in CI without playwright:
    # there, its absence stops the run here instead.
    import playwright.sync_api  # noqa: F401


def unavailable(message: str):
    """Skip locally, fail in CI: a browser test that silently skips in CI proves nothing."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Remember each phase's outcome on the test item, so page fixtures can screenshot a failure."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = shutil.which(CHROMIUM) or (CHROMIUM if os.access(CHROMIUM, os.X_OK) else None)
    if not path:
        unavailable(f"chromium not found at {CHROMIUM}: install it with `bash scripts/install.sh --test` "
                    "(apt-get install chromium-headless-shell chromium) or set CHROMIUM_PATH")
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    try:
        from playwright import sync_api
    except ImportError:
        unavailable("playwright is not installed: .venv/bin/python -m pip install -r requirements-test.txt")
    playwright = sync_api.sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture(scope="session")
def custom_reward_app_url(request, tmp_path_factory):
    """A second real app, `python app.py` in a child process, started the way an owner enables custom
    rewards (the switch is read when the UI is built, so the in-process app of app_url cannot flip it)."""
    # tests/conftest.py's helper; both files are named conftest, so ask pytest for the module, not `import`.
    port = request.config.pluginmanager.get_plugin(str(ROOT / "tests" / "conftest.py")).free_port()
    env = {**os.environ, "GRPO_PLAYGROUND_ALLOW_CUSTOM_REWARD": "1", "GRADIO_SERVER_PORT": str(port),
           "GRPO_PLAYGROUND_RUNS_DIR": str(tmp_path_factory.mktemp("custom-runs")), "OMP_NUM_THREADS": "1"}
    log = (tmp_path_factory.mktemp("custom-app") / "app.log").open("w")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + APP_START_S
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail(f"`python app.py` did not serve on port {port} within {APP_START_S} s; see {log.name}")
    yield f"http://127.0.0.1:{port}/"
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


def open_page(browser, url: str):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_role("tab").first.wait_for()  # Gradio renders client-side: wait for the tabs to exist
    return context, page


def drawn_texts(page, locator, timeout_s: float = 15.0) -> list[str]:
    """The texts once there are any: vega draws a chart's axes after its marks, and a tick may redraw the chart
    (CI read the axis labels between the marks and the axes: [])."""
    deadline = time.monotonic() + timeout_s
    while not (texts := locator.all_text_contents()) and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    return texts


def file_stem(request) -> str:
    """The test's name, safe as a file name (parametrized ids can hold anything)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)


def close_page(request, context, page) -> None:
    """Close the page; after a failed test, first save what the browser showed (CI keeps the folder)."""
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"FAILED-{file_stem(request)}.png"), full_page=True)
    context.close()


@pytest.fixture
def page(request, browser, app_url):
    """A fresh page on the real app, loaded and ready; closed after the test (screenshot if it failed)."""
    context, page = open_page(browser, app_url)
    yield page
    close_page(request, context, page)


@pytest.fixture
def custom_reward_page(request, browser, custom_reward_app_url):
    """A fresh page on the app that allows custom reward code."""
    context, page = open_page(browser, custom_reward_app_url)
    yield page
    close_page(request, context, page)


@pytest.fixture
def expect(browser):
    """Playwright's auto-waiting `expect`, as a fixture so that a missing playwright skips/fails like the rest."""
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)  # its own default is 5 s: too short for a round trip under load
    return expect


@pytest.fixture
def screenshot(request):
    """screenshot(page, "name") saves artifacts/screenshots/<test name>-<name>.png and returns its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    prefix = file_stem(request)

    def save(page, name: str) -> Path:
        path = SCREENSHOTS / f"{prefix}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save
