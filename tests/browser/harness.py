"""The browser harness of the console tests: a headless Chromium driven by chromedriver, with
the checks every page load gets (Content-Security-Policy header, no console error, axe-core,
screenshots in light and dark, desktop and phone) and small HTTP helpers for the JSON API.

Configured by environment variables (scripts/browser_test.sh sets them all):
  AIGW_BROWSER_BASE_URL     the console's origin, e.g. http://127.0.0.1:8080
  AIGW_BROWSER_BACKEND      a label for the screenshots' folder (sqlite, postgres)
  AIGW_BROWSER_SHOTS        screenshot root (default target/browser-screenshots)
  AIGW_BROWSER_AXE          path of axe.min.js
  AIGW_BROWSER_CHROMIUM     the browser (default /usr/bin/chromium)
  AIGW_BROWSER_CHROMEDRIVER the driver (default /usr/bin/chromedriver)
"""

import base64
import contextlib
import json
import os
import re
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    StaleElementReferenceException,
    TimeoutException,
    UnexpectedAlertPresentException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

BASE = os.environ.get("AIGW_BROWSER_BASE_URL", "http://127.0.0.1:8080").rstrip("/")
BACKEND = os.environ.get("AIGW_BROWSER_BACKEND", "local")
SHOTS = os.path.join(os.environ.get("AIGW_BROWSER_SHOTS", "target/browser-screenshots"), BACKEND)
AXE = os.environ.get("AIGW_BROWSER_AXE", ".cache/axe-core/axe.min.js")
CHROMIUM = os.environ.get("AIGW_BROWSER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("AIGW_BROWSER_CHROMEDRIVER", "/usr/bin/chromedriver")

DEVICES = {"desktop": (1440, 900, False), "phone": (390, 844, True)}
PASSWORD = "a long browser passphrase"
# Console messages that are not the page's fault: the browser asks for /favicon.ico on its own.
IGNORED_CONSOLE = [re.compile(r"/favicon\.ico - Failed to load resource")]

_axe_source = None


def axe_source():
    global _axe_source
    if _axe_source is None:
        with open(AXE, encoding="utf-8") as f:
            _axe_source = f.read()
    return _axe_source


def unique_email(tag):
    return f"{tag}-{secrets.token_hex(4)}@example.com"


# ---------------------------------------------------------------- plain HTTP (no browser)



def gone(el):
    """A wait condition: `el` has left the document (the browser is on another page). Like
    `staleness_of`, but chromedriver sometimes reports an element of a page being replaced as
    "Node with given id does not belong to the document" rather than as stale."""

    def check(_driver):
        try:
            el.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            if "does not belong to the document" in str(e):
                return True
            raise

    return check

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def http(method, path, body=None, headers=None, follow=True, base=BASE):
    """(status, headers, body bytes) of one request; never raises on an HTTP status."""
    data = None
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def api(method, path, body=None, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    status, _, raw = http(method, "/api/v1" + path, body, headers)
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        doc = raw.decode(errors="replace")
    return status, doc


def register_api(email, password=PASSWORD, name=None):
    """Registers an account through the JSON API; returns its access token."""
    body = {"email": email, "password": password}
    if name is not None:
        body["name"] = name
    status, doc = api("POST", "/auth/register", body)
    assert status in (200, 201), f"register {email}: {status} {doc}"
    return doc["data"]["token"]


def chat(key, content="hello"):
    """Status and body of one chat completion with the `echo` model."""
    status, _, raw = http(
        "POST",
        "/api/v1/ai/chat/completions",
        {"model": "echo", "messages": [{"role": "user", "content": content}]},
        {"Authorization": f"Bearer {key}"},
    )
    return status, raw.decode(errors="replace")


def page_exists(path):
    """False when the route answers 404 without a session (the page is not in this build)."""
    status, _, _ = http("GET", path, follow=False)
    return status != 404


# ---------------------------------------------------------------- the browser


class Browser:
    """One Chromium (its own profile, so its own session cookie) and the per-page checks."""

    def __init__(self, label):
        self.label = label
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--disable-gpu",
            "--window-size=1440,900",
            "--lang=en-US",
            "--no-first-run",
            "--disable-extensions",
            "--password-store=basic",
            "--hide-scrollbars",
        ):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        # An alert stays open, so that `no_alert` sees it (instead of a failure on the next command).
        opts.set_capability("unhandledPromptBehavior", "ignore")
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        self.driver.set_script_timeout(60)
        self.driver.set_page_load_timeout(30)
        self.cdp("Network.enable", {})
        # Record alert() calls of every document: a script injected through DevTools runs
        # whatever the page's CSP says, so it sees an alert even when CSP would let one through.
        self.cdp(
            "Page.addScriptToEvaluateOnNewDocument",
            {"source": "window.__alerts=[];for(const f of ['alert','confirm','prompt']){const o=window[f];"
             "window[f]=function(m){window.__alerts.push(f+':'+m);return o.apply(window,arguments)}}"},
        )
        self.set_device("desktop")
        self.set_scheme("light")
        self.pages = []

    # -- plumbing

    def cdp(self, cmd, params):
        return self.driver.execute_cdp_cmd(cmd, params)

    def close(self):
        try:
            self.driver.quit()
        except Exception:
            pass

    def set_device(self, device):
        width, height, mobile = DEVICES[device]
        self.cdp(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )

    def set_scheme(self, scheme):
        self.cdp(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
        )

    def drain_logs(self):
        self.driver.get_log("performance")
        self.driver.get_log("browser")

    @property
    def path(self):
        return urllib.parse.urlsplit(self.driver.current_url).path

    def find(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css):
        return self.find(css).text

    def fill(self, css, value):
        el = self.find(css)
        el.clear()
        el.send_keys(value)

    def select(self, css, value):
        from selenium.webdriver.support.ui import Select

        Select(self.find(css)).select_by_value(value)

    def wait(self, condition, timeout=10, message=""):
        return WebDriverWait(self.driver, timeout).until(condition, message)

    # -- navigation, each followed by the page checks

    def visit(self, path, page, **kw):
        self.drain_logs()
        with self.alerts_fail(page):
            self.driver.get(BASE + path)
        return self.loaded(page, **kw)

    @contextlib.contextmanager
    def alerts_fail(self, page):
        """An alert the page raises (which blocks WebDriver) becomes a plain test failure."""
        try:
            yield
        except UnexpectedAlertPresentException as e:
            raise AssertionError(f"[{self.label}] {page}: the page raised an alert: {e.alert_text!r}") from None

    def submit(self, target, page, **kw):
        """Clicks the submit button of `target` (a CSS selector or an element: a form, a field
        inside one, or the button itself) and checks the page the browser lands on."""
        el = self.find(target) if isinstance(target, str) else target
        if self.tag(el) not in ("button", "form") and el.get_attribute("type") not in ("submit", "image"):
            el = el.find_element(By.XPATH, "ancestor::form")
        if self.tag(el) == "button":
            form = el.find_elements(By.XPATH, "ancestor::form")
            kw.setdefault("confirm", form[0].get_attribute("data-confirm") if form else None)
        if self.tag(el) == "form":
            kw.setdefault("confirm", el.get_attribute("data-confirm"))
            buttons = el.find_elements(By.CSS_SELECTOR, "button[type=submit], input[type=submit], button:not([type])")
            if not buttons:  # a search form submitted with Enter
                form = el
                return self.click(None, page, action=lambda: self.driver.execute_script("arguments[0].requestSubmit()", form), **kw)
            el = buttons[0]
        return self.click(el, page, **kw)

    def tag(self, el):
        """The element's tag name. Not WebElement.tag_name: chromedriver builds that from
        `element.prefix`, which a form control named "prefix" shadows on its form (/admin/keys)."""
        return self.driver.execute_script(
            "return Object.getOwnPropertyDescriptor(Element.prototype, 'localName').get.call(arguments[0])", el
        )

    def follow(self, target, page, **kw):
        """Clicks a link (CSS selector or element) and checks the page it opens."""
        return self.click(self.find(target) if isinstance(target, str) else target, page, **kw)

    def click(self, el, page, action=None, confirm=None, **kw):
        """Clicks `el` (or runs `action`), accepts the console's confirmation dialog when
        `confirm` is its expected text, waits for the next page and checks it."""
        self.drain_logs()
        old = self.find("html")
        with self.alerts_fail(page):
            (action or el.click)()
            if confirm:
                self.accept_confirm(confirm)
            self.wait(gone(old), 15, f"[{self.label}] no new page after clicking for {page}")
        return self.loaded(page, **kw)

    def accept_confirm(self, expected, accept=True):
        WebDriverWait(self.driver, 5).until(EC.alert_is_present(), f"no confirmation dialog ({expected!r})")
        dialog = self.driver.switch_to.alert
        assert dialog.text == expected, f"the confirmation says {dialog.text!r}, expected {expected!r}"
        dialog.accept() if accept else dialog.dismiss()

    def loaded(self, page, **kw):
        """The checks of every page: CSP header, status, no console error, one main and one h1,
        axe-core in light and dark, screenshots."""
        with self.alerts_fail(page):
            return self._loaded(page, **kw)

    def _loaded(self, page, expect_status=None, shots=True, axe=True):
        self.wait(lambda d: d.execute_script("return document.readyState") == "complete", 15)
        self.pages.append(page)
        status, headers = self.document_response()
        where = f"[{self.label}] {page} ({self.driver.current_url})"
        assert headers is not None, f"{where}: no document response in the performance log"
        if expect_status is None:
            assert status < 400, f"{where}: HTTP {status}: {self.body_text()!r}"
        elif expect_status != "any":
            assert status == expect_status, f"{where}: HTTP {status}, expected {expect_status}"
        csp = headers.get("content-security-policy")
        assert csp, f"{where}: no Content-Security-Policy header ({sorted(headers)})"
        for bad in ("unsafe-inline", "unsafe-eval"):
            assert bad not in csp, f"{where}: CSP allows {bad}: {csp}"
        self.no_alert(where)
        assert len(self.find_all("main#main")) == 1, f"{where}: no <main id=main>"
        h1 = self.find_all("h1")
        assert len(h1) == 1, f"{where}: {len(h1)} <h1> elements"
        # A page answered with an error status on purpose (a refused form) is logged by the
        # browser as a failed load of the document itself: not a fault of the page.
        own = re.compile(re.escape(self.driver.current_url) + r" - Failed to load resource: the server responded with a status of " + str(status))
        self.assert_console_clean(where, [own] if status and status >= 400 else [])
        if axe or shots:
            self.check_page(page, axe, shots)
        return self

    def check_page(self, page, axe=True, shots=True):
        """axe-core and the screenshots of the page now shown (also after it changed in place)."""
        where = f"[{self.label}] {page} ({self.driver.current_url})"
        self.axe_and_shots(page, where, axe, shots)
        self.assert_console_clean(where)
        self.no_alert(where)

    def body_text(self, limit=300):
        return self.driver.execute_script("return document.body ? document.body.innerText : ''")[:limit]

    def document_response(self):
        """(status, lower-cased headers) of the last top-level document response since the
        logs were drained, read from the DevTools performance log."""
        found = (None, None)
        for entry in self.driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg.get("method") != "Network.responseReceived":
                continue
            params = msg["params"]
            if params.get("type") != "Document":
                continue
            resp = params["response"]
            headers = {k.lower(): v for k, v in resp.get("headers", {}).items()}
            found = (resp.get("status"), headers)
        return found

    def assert_console_clean(self, where, ignored=()):
        ignored = IGNORED_CONSOLE + list(ignored)
        errors = [
            e
            for e in self.driver.get_log("browser")
            if e.get("level") == "SEVERE" and not any(p.search(e.get("message", "")) for p in ignored)
        ]
        assert not errors, f"{where}: browser console errors:\n" + "\n".join(e["message"] for e in errors)

    def no_alert(self, where):
        try:
            alert = self.driver.switch_to.alert
            text = alert.text
            alert.dismiss()
            raise AssertionError(f"{where}: an alert was raised: {text!r}")
        except NoAlertPresentException:
            pass
        calls = self.driver.execute_script("return window.__alerts || []")
        assert not calls, f"{where}: alert/confirm/prompt called: {calls}"

    def axe_and_shots(self, page, where, axe, shots):
        os.makedirs(SHOTS, exist_ok=True)
        problems = []
        # Desktop light, desktop dark, phone dark, phone light: three switches, not four.
        for device, scheme in (("desktop", "light"), ("desktop", "dark"), ("phone", "dark"), ("phone", "light")):
            self.set_device(device)
            self.set_scheme(scheme)
            if axe and device == "desktop":
                problems += [f"{scheme}: {p}" for p in self.run_axe()]
            if shots:
                self.screenshot(os.path.join(SHOTS, f"{page}-{scheme}-{device}.png"))
        self.set_device("desktop")
        self.set_scheme("light")
        assert not problems, f"{where}: axe-core found serious/critical violations:\n" + "\n".join(problems)

    def run_axe(self):
        if not self.driver.execute_script("return typeof window.axe === 'object'"):
            self.driver.execute_script(axe_source())
        result = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {resultTypes: ['violations']})"
            ".then(r => done(JSON.stringify(r.violations)))"
            ".catch(e => done(JSON.stringify({error: String(e)})));"
        )
        violations = json.loads(result)
        if isinstance(violations, dict):
            raise AssertionError(f"axe-core failed: {violations['error']}")
        out = []
        for v in violations:
            if v.get("impact") in ("serious", "critical"):
                targets = "; ".join(
                    f"{' '.join(n.get('target', []))} :: {n.get('failureSummary', '').strip()}" for n in v["nodes"][:5]
                )
                out.append(f"[{v['impact']}] {v['id']}: {v['help']} ({len(v['nodes'])} nodes) {targets}")
        if out:
            print("\n".join(out))
        return out

    def screenshot(self, path):
        # The whole page, at the emulated width (not only the viewport).
        height = self.driver.execute_script(
            "return Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0)"
        )
        width, vh, _ = DEVICES["phone" if "-phone" in path else "desktop"]
        shot = self.cdp(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": min(max(height, vh), 6000), "scale": 1},
            },
        )
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    # -- console flows

    def login(self, email, password=PASSWORD, page="login"):
        self.visit("/login", page)
        self.fill("#email", email)
        self.fill("#password", password)
        return self.submit("button[type=submit]", "keys-after-login", shots=False)

    def cookies_header(self):
        return "; ".join(f"{c['name']}={c['value']}" for c in self.driver.get_cookies())

    def elements_with_text(self, text):
        """Elements whose own trimmed text content is exactly `text`."""
        return self.driver.execute_script(
            "const t = arguments[0]; return [...document.querySelectorAll('body *')]"
            ".filter(e => e.textContent.trim() === t && ![...e.children].some(c => c.textContent.trim() === t));",
            text,
        )


def poll(fn, timeout=10.0, interval=0.5):
    """fn() until it returns something true; the last value (falsy when it timed out)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def transferred(path, accept="gzip, br"):
    """Bytes of `path` as served with Accept-Encoding (compressed when the server compresses)."""
    status, headers, body = http("GET", path, headers={"Accept-Encoding": accept})
    return status, headers, body


__all__ = [
    "BASE", "BACKEND", "Browser", "PASSWORD", "api", "chat", "http", "page_exists",
    "poll", "register_api", "transferred", "unique_email", "TimeoutException", "By", "EC",
]
