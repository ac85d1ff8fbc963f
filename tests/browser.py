"""Headless Chromium for the browser tests (the dashboard's and the report's): where the browser and
its driver are, and one way to start it, so both tests see pages in the same browser set-up.

Uses the system chromedriver (no selenium-manager download). `missing()` says what of the browser
stack is not installed (None when it all is), for the tests' `require`.
"""

from __future__ import annotations

import shutil
from typing import Any

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.remote.webdriver import WebDriver
except ImportError:  # selenium missing: the tests skip (and fail under CI=true)
    webdriver = None  # type: ignore[assignment]
    WebDriver = Any  # type: ignore[assignment,misc]

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")


def missing() -> str | None:
    """What of selenium, Chromium and chromedriver is not installed; None when nothing is."""
    if webdriver is None:
        return "selenium not installed"
    if CHROMIUM is None or CHROMEDRIVER is None:
        return "chromium / chromedriver not installed"
    return None


def make_driver(width: int = 1400, height: int = 1000) -> WebDriver:
    """Headless Chromium of width x height px (English, browser console logged)."""
    opts = Options()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--hide-scrollbars",
        "--lang=en-US",
    ):
        opts.add_argument(arg)
    opts.binary_location = CHROMIUM or ""
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    drv.set_window_size(width, height)
    return drv
