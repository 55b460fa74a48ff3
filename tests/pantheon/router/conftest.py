"""Router tests: a failed test that used the shared fleet reports the router's and HAProxy's log with it."""

import pytest

from tests.pantheon.router.fleet_kit import Router


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    fleet = getattr(item, "funcargs", {}).get("fleet")
    router = fleet[0] if isinstance(fleet, tuple) else None
    if isinstance(router, Router):
        report.sections.append(("router and haproxy log (last 8000 characters)", router.log()[-8000:]))
