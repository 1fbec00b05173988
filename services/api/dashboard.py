"""The dashboard at `/`: plain HTML, CSS and JavaScript files in `static/` (no framework, no build step), drawn
from the JSON endpoints of `views.py` and the SSE decision stream. `/static/…` serves the files.

    index.html      the page: summary bar, tabs (GPU map, queues, workloads, over time, decisions), side panel
    dashboard.css   the look (laptop screens: 1280 px and up; narrower screens stack)
    util.js         fetching, formatting, the side panel, paging
    gpumap.js  queues.js  workloads.js  history.js  stream.js  app.js (tabs, refresh loop)
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC = Path(__file__).parent / "static"


def index_page() -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def routes(app: web.Application) -> None:
    app.router.add_static("/static/", STATIC, append_version=False)
