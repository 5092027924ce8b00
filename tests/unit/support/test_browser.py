"""poll_page: a page that fails to load or changes under a look is loaded again; a page
that never shows what is looked for fails naming it and what the page showed."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from support import browser


class FakeDriver:
    """Fails its first load; counts loads."""

    def __init__(self) -> None:
        self.loads = 0

    def get(self, url: str) -> None:
        self.loads += 1
        if self.loads == 1:
            raise WebDriverException("net::ERR_CONNECTION_REFUSED")

    def find_element(self, by: str, value: str) -> Any:
        class Body:
            text = "no data yet"

        return Body()


def test_a_failed_load_and_a_stale_look_are_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(browser, "RELOAD_SECONDS", 2)
    driver = FakeDriver()
    looks = []

    def look(_driver: Any) -> str | None:
        looks.append(driver.loads)
        if len(looks) == 1:
            raise StaleElementReferenceException("the card was drawn again")
        return "card"

    assert browser.poll_page(driver, "http://board", look, 10, "the card") == "card"  # type: ignore[arg-type]
    # Load 1 refused; load 2 read while it changed; load 3 showed the card.
    assert driver.loads == 3
    assert looks == [2, 3]


def test_what_was_never_seen_is_named_with_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(browser, "RELOAD_SECONDS", 0.2)
    driver = FakeDriver()
    with pytest.raises(AssertionError, match="the card at http://board; the page: no data yet"):
        browser.poll_page(driver, "http://board", lambda _d: None, 1, "the card")  # type: ignore[arg-type]
