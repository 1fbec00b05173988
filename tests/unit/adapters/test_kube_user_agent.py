"""connect_kube: every request names the Shoal component that sent it (the apiserver's audit log shows it)."""

from __future__ import annotations

import re

from aiohttp import web

from shoal.adapters.kube import Kube, connect_kube, user_agent
from shoal.settings import KubeSettings

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


def test_the_user_agent_names_the_component_and_version():
    assert re.fullmatch(r"shoal-binder/\S+ \(\w+/\w+\)", user_agent("binder")), user_agent("binder")


async def test_requests_carry_the_components_user_agent(tmp_path):
    seen: list[str] = []

    async def version(request: web.Request) -> web.Response:
        seen.append(request.headers.get("User-Agent", ""))
        return web.json_response({"major": "1", "minor": "36"})

    app = web.Application()
    app.router.add_get("/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(port=port))
    try:
        for component in ("podgrouper", "cli"):
            api = await connect_kube(KubeSettings(kubeconfig=str(path)), **({"component": component}
                                                                            if component != "cli" else {}))
            try:
                assert (await Kube(api).request("GET", "/version"))["minor"] == "36"
            finally:
                await api.close()
    finally:
        await runner.cleanup()
    assert seen == [user_agent("podgrouper"), user_agent("cli")]
