"""pytest fixtures of the console browser tests (see README.md; scripts/browser_test.sh runs them)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from harness import Browser  # noqa: E402


@pytest.fixture
def browsers():
    """A factory of Chromium sessions (each with its own cookies), all closed after the test."""
    opened = []

    def new(label="user"):
        b = Browser(label)
        opened.append(b)
        return b

    yield new
    for b in opened:
        b.close()


@pytest.fixture
def browser(browsers):
    return browsers("user")


@pytest.fixture(scope="session")
def admin_credentials():
    email = os.environ.get("AIGW_BROWSER_ADMIN_EMAIL")
    password = os.environ.get("AIGW_BROWSER_ADMIN_PASSWORD")
    if not email or not password:
        pytest.skip("AIGW_BROWSER_ADMIN_EMAIL/AIGW_BROWSER_ADMIN_PASSWORD not set (scripts/browser_test.sh creates the admin)")
    return email, password
