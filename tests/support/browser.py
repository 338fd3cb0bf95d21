"""Headless Chromium for the web chat page's tests: Debian's `chromium` driven by its
`chromium-driver` through selenium, screenshots saved as the run's artifacts, and waits
on conditions the page's own DOM states (nothing is timed)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

PATIENCE = 120.0  # a bound on any wait, so that a broken test ends; nothing is timed
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
ARTIFACTS = Path(os.environ.get("PARLANCE_ARTIFACTS")
                 or Path(__file__).resolve().parents[1] / ".artifacts") / "web"


def chromium() -> tuple[str, str]:
    """The browser and its driver, or a skip: no browser can run on this machine."""
    browser = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip("browser tests need Chromium and its WebDriver "
                    "(Debian: apt-get install chromium chromium-driver; .ci/run does it)")
    return browser, driver


def until(predicate: Any, what: str) -> None:
    """Polls `predicate()` until it is true (bounded so that a broken test ends)."""
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


class Browser:
    """One headless Chromium window."""

    def __init__(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        binary, driver = chromium()
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,820",
                     "--force-device-scale-factor=1", "--no-first-run"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(options=options, service=Service(driver))
        self.driver.set_script_timeout(PATIENCE)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def open(self, url: str) -> None:
        """The page, fresh: nothing kept from an earlier test in this browser."""
        self.driver.get(url)
        self.driver.execute_script("localStorage.clear(); sessionStorage.clear();")
        self.driver.get(url)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, condition: str, what: str, *args: Any) -> Any:
        """Polls a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + PATIENCE
        while True:
            value = self.js(f"return ({condition});", *args)
            if value:
                return value
            assert time.monotonic() < deadline, f"the page never showed {what}"
            time.sleep(0.05)

    # -- the chat page ------------------------------------------------------------

    def ready(self, base_url: str) -> None:
        """The chat page, fresh, once its model list is filled."""
        self.open(base_url + "/")
        self.wait("document.body.dataset.ready === 'true' && "
                  "document.getElementById('model').options.length > 0", "the model list")

    def send(self, text: str, model: str) -> None:
        self.js("""
            document.getElementById('model').value = arguments[0];
            document.getElementById('prompt').value = arguments[1];
            document.getElementById('composer').requestSubmit();""", model, text)

    def answered(self) -> None:
        self.wait("document.body.dataset.state === 'idle' && "
                  "document.querySelector('.message.assistant .stats')", "a finished answer")

    def last_answer(self) -> str:
        return self.js("const all = document.querySelectorAll('.message.assistant');"
                       "return all[all.length - 1].innerText;")

    def answer_text(self) -> str:
        """The markdown of the last answer as far as it has come."""
        return self.js("const all = document.querySelectorAll('.message.assistant .markdown');"
                       "return all.length ? all[all.length - 1].textContent.trim() : '';")

    def screenshot(self, name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        print(f"screenshot: {path}")
        return path

    def console_errors(self) -> list[str]:
        return [entry["message"] for entry in self.driver.get_log("browser")
                if entry["level"] == "SEVERE"]

    def close(self) -> None:
        self.driver.quit()


# -- accessibility and emulation ---------------------------------------------------------

AXE = ("axe-core", "4.11.4")


def axe_source() -> str:
    """axe-core's script, from the npm registry (installed once into the clients cache)."""
    from tests.support.npm import npm_package

    package, version = AXE
    return (npm_package(package, version) / "node_modules" / package / "axe.min.js").read_text()


def serious_violations(browser: Browser) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of the page as it is now."""
    if not browser.js("return Boolean(window.axe);"):
        browser.driver.execute_cdp_cmd("Runtime.evaluate", {"expression": axe_source()})
    result = browser.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then("
        "  (r) => done(r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,"
        "    nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5)}))),"
        "  (e) => done([{id: 'axe-failed', impact: 'critical', help: String(e), nodes: []}]));")
    return [v for v in result if v["impact"] in ("serious", "critical")]


def emulate(browser: Browser, *, dark: bool = False, width: int | None = None,
            height: int | None = None) -> None:
    """The colour scheme and viewport the page sees (None: the window's own)."""
    browser.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})
    if width is None:
        browser.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    else:
        browser.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": True})
