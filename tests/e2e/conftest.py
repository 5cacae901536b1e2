"""The e2e tests' server and browser.

`server`: `quanta serve` as a real subprocess on a free port with a temporary SQLite database
(`tmp_path/q.db`, which a test may also open) and two CPU devices, one per test. `module_server`: the
same, one per test module (`tests.integration.live_server`), for modules whose tests share a search.
`browser`: Debian's headless Chromium driven by Playwright, one per module (each test opens its own
context). Skipped where Chromium or Playwright is missing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.live_server import LiveServer, same_pythonpath, start_server

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "e2e-token-0123456789abcdefghijklmno"  # QUANTA_TOKEN has at least 32 characters
# The tests' own API clients open a connection per request: one kept alive across a browser step that
# outlasts the server's keep-alive (5 s) can be reset as the next request goes out ("connection reset
# by peer"), which httpx does not retry.
FRESH_CONNECTIONS = httpx.Limits(max_keepalive_connections=0)


def api_client(base_url: str, headers: dict[str, str], timeout: float) -> httpx.Client:
    """A test's own client of the API at `base_url` (a connection per request: `FRESH_CONNECTIONS`)."""
    return httpx.Client(base_url=base_url, headers=headers, timeout=timeout, limits=FRESH_CONNECTIONS)


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(os.environ.get("QUANTA_TEST_ARTIFACTS", ROOT / "test-artifacts"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def server(tmp_path):
    port = _free_port()
    env = dict(os.environ, QUANTA_TOKEN=TOKEN, QUANTA_TRAINABLE_ALLOWLIST="tests.,examples.", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = same_pythonpath()  # serve imports nothing from its working directory: tests.* via PYTHONPATH
    log_path = tmp_path / "serve.log"
    log = log_path.open("w")  # noqa: SIM115 (closed in the finally below)
    cmd = [
        sys.executable, "-m", "quanta.cli", "serve",
        "--host", "127.0.0.1", "--port", str(port),
        "--db", f"sqlite:///{tmp_path}/q.db", "--devices", "cpu:2", "--workdir", str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"quanta serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"quanta serve did not answer /healthz:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        log.close()


@pytest.fixture(scope="module")
def module_server(tmp_path_factory) -> Iterator[LiveServer]:
    """One `quanta serve` for the module's tests (token TOKEN, two CPU devices, `tests.` trainables)."""
    live = start_server(tmp_path_factory.mktemp("serve"), token=TOKEN)
    try:
        live.wait_ready(60)
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for the module's tests; a test opens its own context (`new_page`)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Python Playwright is missing (pip install playwright)"
    )
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def new_page(browser, errors: list[str], token: str | None = None, path: str = "", base: str = ""):
    """A page in a fresh context that records script errors and failed requests into `errors`; with
    `token`, opened signed in at `base/?token=...path` (path: a `#/...` route)."""
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text}"))
    if token is not None:
        page.goto(f"{base}/?token={token}{path}")
    return page


def canvas_ink(page, selector: str) -> int:
    """How many pixels of a chart's canvas are painted (uPlot draws series and axes there)."""
    return page.evaluate(
        """(sel) => {
            const c = document.querySelector(sel);
            if (!c || !c.width || !c.height) return 0;
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
            return n;
        }""",
        selector,
    )
