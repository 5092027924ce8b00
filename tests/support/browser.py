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
from tfjob_localcluster import packages

ARTIFACTS = ROOT / "test-artifacts"
T = TypeVar("T")


@contextmanager
def chromium(home: Path, width: int = 1400, height: int = 1000) -> Iterator[WebDriver]:
    """A headless Chromium whose files all live under `home`."""
    packages.ensure(["chromium", "chromedriver"])
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
    environment = {
        **os.environ,
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
    """Loads `url` again until `look` finds what it looks for (not None); raises saying
    `what` was not seen, with the page's text, after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    seen = ""
    while True:
        try:
            driver.get(url)
            inner = time.monotonic() + 10
            while time.monotonic() < inner:
                found = look(driver)
                if found is not None:
                    return found
                time.sleep(0.5)
            seen = driver.find_element("tag name", "body").text[-500:]
        except WebDriverException as error:
            seen = f"(the page did not load: {error.msg})"
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen at {url} in {timeout:g} s; the page: {seen}")
        time.sleep(1)
