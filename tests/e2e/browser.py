"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol, for the dashboard's browser tests.

    async with Browser.launch(tmp_path) as page:          # 1440×900, a laptop screen
        await page.goto("http://127.0.0.1:8080/")
        await page.wait_for("document.querySelectorAll('.cell').length > 0", what="the GPU map")
        await page.click("#tabs button[data-tab=queues]")  # real mouse events at the element's centre
        value = await page.eval("shoal.timings.gpuMapRenderMs")
        await page.screenshot(tmp_path / "queues.png")

No browser is downloaded: the system chromium runs (installed with apt-get when missing and allowed, as the
stack's other host tools are; otherwise the test fails naming the install command). JavaScript errors on the
page are collected in `page.errors` so a test can assert there were none.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_FIX = "apt-get install -y --no-install-recommends chromium chromium-driver"
WIDTH, HEIGHT = 1440, 900


def chromium_path() -> str:
    from shoal.devstack.systools import require

    require({"chromium": CHROMIUM_FIX}, lambda msg: print(msg, file=sys.stderr, flush=True),
            why="the dashboard's browser tests")
    path = shutil.which("chromium")
    assert path, f"chromium not found on PATH: run `{CHROMIUM_FIX}`"
    return path


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self.errors: list[str] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            future = self._waiting.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)
            elif data.get("method") == "Runtime.exceptionThrown":
                details = data["params"]["exceptionDetails"]
                self.errors.append(str((details.get("exception") or {}).get("description") or details.get("text")))
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"].get("type") == "error":
                self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in data["params"]["args"]))
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(ConnectionError("the browser closed the DevTools connection"))

    async def send(self, method: str, params: dict | None = None, timeout_s: float = 60.0) -> dict:
        message_id = next(self._ids)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[message_id] = future
        await self._ws.send_str(json.dumps({"id": message_id, "method": method, "params": params or {}}))
        answer = await asyncio.wait_for(future, timeout_s)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result") or {}

    async def eval(self, expression: str, timeout_s: float = 60.0) -> Any:
        """The value of a JavaScript expression (promises awaited); a thrown error fails the test."""
        result = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                      "awaitPromise": True}, timeout_s)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise AssertionError(f"JavaScript failed: {expression[:200]}: "
                                 f"{(details.get('exception') or {}).get('description') or details.get('text')}")
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, *, timeout_s: float = 90.0, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            last = await self.eval(expression)
            if last:
                return last
            await asyncio.sleep(0.3)
        raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} in the page; last: {last!r}")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})
        await self.wait_for("document.readyState === 'complete'", what=f"{url} to load")

    async def click(self, selector: str) -> None:
        """A real left click (mouse pressed and released) at the centre of the first element `selector` finds."""
        box = await self.eval(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; e.scrollIntoView({{block: "center"}}); const r = e.getBoundingClientRect();
            return {{x: r.left + r.width / 2, y: r.top + r.height / 2}}; }})()""")
        assert box, f"nothing on the page matches {selector}"
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", {"type": kind, "x": box["x"], "y": box["y"],
                                                         "button": "left", "clickCount": 1})

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", {"format": "png"})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader


class Browser:
    @staticmethod
    @contextlib.asynccontextmanager
    async def launch(work_dir: Path) -> AsyncIterator[Page]:
        profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=work_dir))
        log = (work_dir / "chromium.log").open("wb")
        proc = subprocess.Popen(  # noqa: S603 - the system chromium, fixed arguments
            [chromium_path(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--user-data-dir={profile}",
             f"--window-size={WIDTH},{HEIGHT}", "about:blank"], stdout=log, stderr=log)
        try:
            port = await _devtools_port(profile, proc)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                    targets = await resp.json()
                target = next(t for t in targets if t.get("type") == "page")
                async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    page = Page(ws)
                    for domain in ("Page.enable", "Runtime.enable"):
                        await page.send(domain)
                    await page.send("Emulation.setDeviceMetricsOverride", {"width": WIDTH, "height": HEIGHT,
                                                                          "deviceScaleFactor": 1, "mobile": False})
                    try:
                        yield page
                    finally:
                        await page.close()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            log.close()
            shutil.rmtree(profile, ignore_errors=True)


async def _devtools_port(profile: Path, proc: subprocess.Popen, timeout_s: float = 60.0) -> int:
    """Chromium writes the port it listens on into DevToolsActivePort once it is ready."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"chromium exited with {proc.returncode} before it was ready (see chromium.log)")
        if marker.exists():
            first = marker.read_text().splitlines()[:1]
            if first and first[0].isdigit():
                return int(first[0])
        await asyncio.sleep(0.1)
    raise AssertionError(f"chromium did not open its DevTools port within {timeout_s:.0f}s")
