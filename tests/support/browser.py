"""Headless Chromium for the tests that look at a web page (TensorBoard), through
Selenium's WebDriver.

Debian's `chromium` and `chromium-driver` are installed when missing, as the local
cluster's packages are (packages.py). The browser's profile, its caches and whatever it
writes under $HOME go to a temporary directory of the test, not to the user's home.
Screenshots are kept in `test-artifacts/` at the repository's root (ignored by git).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from support.checkout import ROOT
from support.waiting import wait_until
from tfjob_localcluster.host import packages

ARTIFACTS = ROOT / "test-artifacts"
T = TypeVar("T")


def install() -> None:
    """Chromium and its driver, installed where missing (a minute on a fresh machine: a
    test that watches something under way installs them before it starts it)."""
    packages.ensure(["chromium", "chromedriver"])


@contextmanager
def chromium(home: Path, width: int = 1400, height: int = 1000) -> Iterator[WebDriver]:
    """A headless Chromium whose files all live under `home`."""
    install()
    home.mkdir(parents=True, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        f"--user-data-dir={home / 'profile'}",
    ):
        options.add_argument(argument)
    # Without FONTCONFIG_FILE: matplotlib's setup in this process (harness/plotting.py)
    # points it at a configuration without fonts, and Chromium cannot start without any.
    environment = {
        **{name: value for name, value in os.environ.items() if name != "FONTCONFIG_FILE"},
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
    }
    service = Service("/usr/bin/chromedriver", env=environment)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: WebDriver, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    return path


def poll_page(
    driver: WebDriver, url: str, look: Callable[[WebDriver], T | None], timeout: float, what: str
) -> T:
    """Looks at `url` until `look` finds what it looks for (not None), loading the page
    again every RELOAD_SECONDS; fails saying `what` was not seen, with the page's text,
    after `timeout` seconds."""
    page = _Page(driver, url)

    def looked() -> T | None:
        page.load_when_stale()
        if not page.loaded:
            return None
        try:
            return look(driver)
        except WebDriverException as error:  # the page changed under the look: load it again
            page.failed(f"(the page could not be read: {error.msg})")
            return None

    return wait_until(
        looked, timeout, lambda _: f"{what} at {url}; the page: {page.text()}", interval=0.5
    )


#: A page that shows data as it arrives (TensorBoard's) is loaded again this often.
RELOAD_SECONDS = 10


class _Page:
    def __init__(self, driver: WebDriver, url: str) -> None:
        self.driver = driver
        self.url = url
        self.loaded_at = -float(RELOAD_SECONDS)
        self.loaded = False
        self.error = ""

    def load_when_stale(self) -> None:
        if time.monotonic() - self.loaded_at < RELOAD_SECONDS:
            return
        self.loaded_at = time.monotonic()
        try:
            self.driver.get(self.url)
            self.loaded, self.error = True, ""
        except WebDriverException as error:
            self.failed(f"(the page did not load: {error.msg})")

    def failed(self, error: str) -> None:
        """Loaded again at the next look, a second on."""
        self.loaded, self.error = False, error
        self.loaded_at = time.monotonic() - RELOAD_SECONDS + 1

    def text(self) -> str:
        if not self.loaded:
            return self.error
        try:
            return str(self.driver.find_element("tag name", "body").text[-500:])
        except WebDriverException as error:
            return f"(the page's text could not be read: {error.msg})"
