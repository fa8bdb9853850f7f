"""The test tiers of tests/conftest.py: marks come from the fixtures a test uses, and a fast test that takes too
long fails with the tier to give it (first imports of a library not counted).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_tiers.py
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
CONFTEST = Path(__file__).with_name("conftest.py")

TESTS = textwrap.dedent("""
    import time

    import pytest


    @pytest.fixture
    def browser():
        return "chromium"


    def test_sleeps(): time.sleep(0.4)

    def test_spins():
        start = time.thread_time()
        while time.thread_time() - start < 0.4:
            pass

    @pytest.mark.slow
    def test_sleeps_marked_slow(): time.sleep(0.4)

    def test_sleeps_with_a_browser(browser): time.sleep(0.4)

    def test_quick(): pass

    def test_imports_a_slow_module_first():
        import slow_to_import  # its first import takes 0.4 s: the session's cost, not this test's
""")


@pytest.fixture
def suite(pytester, monkeypatch):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_suite=TESTS, slow_to_import="import time\ntime.sleep(0.4)\n")
    pytester.syspathinsert()
    monkeypatch.setenv("GRPO_PLAYGROUND_FAST_TEST_S", "0.2")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine: both limits are 0.2 s
    return pytester


def test_a_fast_test_over_the_limit_fails_saying_which_tier_to_give_it(suite):
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(["*test_sleeps took 0.* s, 0.0 s of CPU (first imports not counted: 0.0 s), over the "
                                 "fast tier's 0.2 s*mark it @pytest.mark.slow*GRPO_PLAYGROUND_FAST_TEST_S=SECONDS*"])
    result.stdout.fnmatch_lines(["*test_spins took * s, 0.4 s of CPU*"])


def test_a_busy_machine_gives_more_wall_time_but_not_more_cpu_time(suite, monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (200.0, 0.0, 0.0))  # the wall-time limit is 0.2 s x 100 cores
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_suite.py::test_spins*"])


def test_tiers_come_from_the_fixtures_and_the_rest_is_fast(suite):
    result = suite.runpytest("-p", "no:cacheprovider", "-m", "fast", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_suite.py::test_sleeps", "test_suite.py::test_spins", "test_suite.py::test_quick",
                                 "test_suite.py::test_imports_a_slow_module_first", "4/6 tests collected*"])
    browser = suite.runpytest("-p", "no:cacheprovider", "-m", "browser", "--collect-only", "-q")
    browser.stdout.fnmatch_lines(["test_suite.py::test_sleeps_with_a_browser", "1/6 tests collected*"])


def test_the_limit_can_be_turned_off(suite, monkeypatch):
    monkeypatch.setenv("GRPO_PLAYGROUND_FAST_TEST_S", "0")
    suite.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=6)


# tests/shared_comparison.py for the workers (new processes): a session fixture that trains, each build a line in BUILDS
SHARED_RUN = textwrap.dedent("""
    import os

    import pytest


    @pytest.fixture(scope="session")
    def finished_comparison():
        with open(os.environ["BUILDS"], "a") as builds:
            builds.write("built\\n")
        return "trained"
""")
READS_THE_RUN = "def test_reads(finished_comparison): assert finished_comparison == 'trained'\n"


def test_two_workers_train_a_shared_run_once_and_start_the_longest_files_side_by_side(pytester, monkeypatch,
                                                                                      pytestconfig):
    if os.environ.get("CI", "").lower() != "true":  # CI runs the suite with it: there, its absence fails here
        pytest.importorskip("xdist", reason="pytest-xdist is in requirements-test.txt (scripts/install.sh --test)")
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(shared_comparison=SHARED_RUN, **{f"tests/test_reads_{i}": READS_THE_RUN for i in range(4)},
                        **{f"tests/test_other_{i}": "def test_other(): pass\n" for i in range(4)})
    first, second = pytestconfig.pluginmanager.get_plugin(str(CONFTEST)).LONGEST_FIRST[:2]  # two conftest modules
    pytester.makepyfile(**{first.removesuffix(".py"): "def test_first(): pass\n",
                           second.removesuffix(".py"): "def test_second(): pass\n"})
    builds = pytester.path / "builds.txt"
    monkeypatch.setenv("BUILDS", str(builds))
    result = pytester.runpytest("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=10)
    assert builds.read_text().splitlines() == ["built"]  # once, not once per worker that reads it
    worker = {test: gw for gw, test in re.findall(r"\[(gw\d)\] .*PASSED (\S+?)::", result.stdout.str())}
    assert len({worker[f"tests/test_reads_{i}.py"] for i in range(4)}) == 1
    assert worker[first] != worker[second]
