"""Headless Chromium (Debian chromium + chromium-driver) driven by selenium, with the DevTools
network log on, so a test can list every request the page made."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def chromium(width: int = 1400, height: int = 1800) -> Iterator[Any]:
    """A headless Chromium session; quit on exit, also after a failure."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("chromium and chromium-driver are missing: run `make setup` (APT_PKGS)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-default-apps", "--metrics-recording-only"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def requested_urls(driver: Any) -> list[str]:
    """Every URL the page asked for since the last call (DevTools Network events)."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def foreign(urls: list[str], origin: str) -> list[str]:
    """The URLs that go anywhere but `origin` (scheme://host:port); data: and blob: are local."""
    want = urlsplit(origin)
    return [u for u in urls if urlsplit(u).scheme not in ("data", "blob")
            and (urlsplit(u).scheme, urlsplit(u).netloc) != (want.scheme, want.netloc)]


def wait_for(what: str, test: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Poll test() until it returns something true; fail with `what` after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = test()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.25)
