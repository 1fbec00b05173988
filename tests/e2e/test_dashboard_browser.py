"""The dashboard in a real browser (Debian's headless chromium over the DevTools protocol) on the real stack.

1. The GPU map shows the test's nodes with their GPUs and the pods bound on them as the apiserver has them; a
   gang submitted with too little free capacity appears in the pending list with the planner's reason (the
   same words `shoal explain` gives); clicking it shows its explanation; once capacity frees, it is bound and
   drawn on the map; the queue tree shows borrowing and the effective limit of an omitted limit; a reclaim
   shows up in the evicted list with its action and evictor; the over-time chart and the decision stream fill.
2. A generated 1,000-node snapshot renders (its time is measured and reported, not asserted).

Screenshots go to the test's tmp_path (`screenshots/`), and also to $SHOAL_SCREENSHOT_DIR when set (the
user guide's images in docs/images/ come from `SHOAL_SCREENSHOT_DIR=docs/images`). What each one shows is
checked in the DOM before it is taken.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import Browser, Page
from e2e_helpers import api_service, eventually
from scenario_helpers import create, pod, podgroup, pods, wait_running

from shoal.adapters.kube import PODS

GANG_WORDS = "are required for gang scheduling"


def launch_api(shoal: Any, stack: Any, **env: str) -> Iterator[str]:
    for url in api_service(shoal, stack, SHOAL_HISTORY_INTERVAL_S="2", **env):
        yield url + "/"


@pytest.fixture(scope="module")
def dashboard(shoal: Any, stack: Any) -> Iterator[str]:
    yield from launch_api(shoal, stack)


class Shots:
    """Screenshots into the test's folder, copied to $SHOAL_SCREENSHOT_DIR when set."""

    def __init__(self, page: Page, folder: Path) -> None:
        self.page, self.folder = page, folder
        self.extra = Path(os.environ["SHOAL_SCREENSHOT_DIR"]) if os.environ.get("SHOAL_SCREENSHOT_DIR") else None
        self.taken: list[Path] = []

    async def take(self, name: str) -> Path:
        await self.page.eval("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        path = await self.page.screenshot(self.folder / f"{name}.png")
        assert path.stat().st_size > 10_000, f"{path} is too small to show anything"
        if self.extra is not None:
            self.extra.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, self.extra / path.name)
        self.taken.append(path)
        return path


async def open_tab(page: Page, tab: str) -> None:
    await page.click(f"#tabs button[data-tab={tab}]")
    await page.wait_for(f"document.getElementById('tab-{tab}').classList.contains('active')", what=f"tab {tab}")


async def choose(page: Page, select: str, value: str) -> None:
    await page.eval(f"""(() => {{ const s = document.querySelector({json.dumps(select)});
        s.value = {json.dumps(value)}; s.dispatchEvent(new Event("change")); }})()""")


def text_of(selector: str) -> str:
    return f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || ''"


async def map_of_pool(page: Page, pool: str) -> dict[str, dict[str, Any]]:
    """What the GPU map draws for `pool`: per node, its cells' states and the pods named in them."""
    return await page.eval(f"""(() => {{ const out = {{}};
        for (const card of document.querySelectorAll('[data-pool={json.dumps(pool)}] .node')) {{
          const cells = [...card.querySelectorAll('.cell')];
          out[card.dataset.node] = {{states: cells.map(c => c.dataset.state),
            pods: cells.flatMap(c => (c.dataset.pod || '').split(' ').filter(Boolean)).sort()}};
        }} return out; }})()""")


async def bound_by_node(kube: Any, namespace: str, nodes: list[str]) -> dict[str, list[str]]:
    """The pods the apiserver shows bound on `nodes`: a pod once per whole GPU, a fractional pod once."""
    out: dict[str, list[str]] = {n: [] for n in nodes}
    for name, obj in (await pods(kube, namespace)).items():
        node = obj["spec"].get("nodeName")
        if node in out and not obj["metadata"].get("deletionTimestamp"):
            limits = obj["spec"]["containers"][0].get("resources", {}).get("limits", {})
            shared = "gpu-fraction" in (obj["metadata"].get("annotations") or {})
            out[node].extend([f"{namespace}/{name}"] * (1 if shared else int(limits.get("nvidia.com/gpu", 0))))
    return {n: sorted(p) for n, p in out.items()}


async def map_matches_cluster(page: Page, kube: Any, namespace: str, pool: str, nodes: list[str]) -> bool:
    drawn = await map_of_pool(page, pool)
    want = await bound_by_node(kube, namespace, nodes)
    return sorted(drawn) == sorted(nodes) and all(
        len(drawn[n]["states"]) == 2 and drawn[n]["pods"] == want[n] for n in nodes)


def gang(namespace: str, name: str, queue: str, pool: str, size: int, **pod_args: Any) -> list[dict]:
    return [podgroup(namespace, name, queue, pool, min_member=size),
            *[pod(namespace, f"{name}-{i}", queue, pool, group=name, **pod_args) for i in range(size)]]


async def test_dashboard_shows_the_gpu_map_a_pending_gang_its_reason_and_the_eviction(
        dashboard, kube, namespace, node_pool, gpu_nodes, queues, tmp_path):
    nodes = await gpu_nodes(3, gpus=2)
    dept = await queues.add("dept", gpu={"quota": 6, "limit": -1, "overQuotaWeight": 1})
    a = await queues.add("a", parent="dept", gpu={"quota": 1, "limit": -1, "overQuotaWeight": 1})
    b = await queues.add("b", parent="dept", gpu={"quota": 2, "overQuotaWeight": 1})  # limit omitted: = quota
    await create(kube, *gang(namespace, "infer", b, node_pool, 2, gpus=0, annotations={"gpu-fraction": "0.5"}))
    await wait_running(kube, namespace, ["infer-0", "infer-1"], timeout_s=150)  # one GPU shared by two halves
    busy = [podgroup(namespace, "busy", a, node_pool), *[pod(namespace, f"busy-{i}", a, node_pool, group="busy")
                                                         for i in range(3)]]
    await create(kube, *busy)
    await wait_running(kube, namespace, [f"busy-{i}" for i in range(3)], timeout_s=120)

    async with Browser.launch(tmp_path) as page:
        shots = Shots(page, tmp_path / "screenshots")
        await page.goto(dashboard)
        await page.wait_for("document.getElementById('sum-nodes').textContent.includes('nodes')", what="the summary")
        await page.wait_for(f"!!document.querySelector('#gpu-pool option[value=\"{node_pool}\"]')", what="the pool")
        await choose(page, "#gpu-pool", node_pool)

        async def map_agrees() -> bool:
            return await map_matches_cluster(page, kube, namespace, node_pool, nodes)

        await eventually(map_agrees, timeout_s=90, what="the GPU map to show the nodes and the bound pods")
        drawn = await map_of_pool(page, node_pool)
        assert sorted(s for n in nodes for s in drawn[n]["states"]) == ["free"] * 2 + ["shared"] + ["whole"] * 3
        await page.click(f'[data-pool="{node_pool}"] .cell.shared')  # who holds which part, the reservation
        await page.wait_for("!!document.querySelector('#cell-pods')", what="the shared GPU's pods")
        cell_text = await page.eval(text_of("#detail-body"))
        assert f"{namespace}/infer-0" in cell_text and f"{namespace}/infer-1" in cell_text and "50%" in cell_text
        assert "reservation pod kai-resource-reservation/" in cell_text and b in cell_text
        await shots.take("gpu-map")
        await page.eval("shoal.closeDetail()")
        await page.click(f'[data-pool="{node_pool}"] .cell.whole')  # a whole GPU: pod, queue and PodGroup
        await page.wait_for(f"({text_of('#cell-pods')}).includes('busy-')", what="the whole GPU's pod")
        assert a in await page.eval(text_of("#cell-pods")) and f"{namespace}/busy" in await page.eval(
            text_of("#cell-pods"))
        await page.eval("shoal.closeDetail()")

        # a gang of 3 with 2 GPUs free: pending, with the planner's reason; b's gang would pass its limit
        await create(kube, *gang(namespace, "wide", a, node_pool, 3))
        await create(kube, *gang(namespace, "bigger", b, node_pool, 2))
        await open_tab(page, "workloads")
        row, b_pending = f'#pending tr[data-pod-group="{namespace}/wide"]', f'#pending tr[data-pod-group="{namespace}/bigger"]'
        await page.wait_for(f"({text_of(row)}).includes({json.dumps(GANG_WORDS)})", timeout_s=120,
                            what="the gang in the pending list with its reason")
        row_text = await page.eval(text_of(row))
        assert "PodSchedulingErrors" in row_text and a in row_text and "gang of 3" in row_text
        assert f"queue {a}: fair share" in row_text  # the figures behind the verdict, as shoal explain says them
        await page.wait_for(f"({text_of(b_pending)}).includes('OverLimit')", timeout_s=120,
                            what="b's gang pending over its limit")
        assert "limit 2 (quota; limit omitted)" in await page.eval(text_of(b_pending))
        await choose(page, "#pending-queue", b)  # filtered by queue
        await page.wait_for(f"!document.querySelector({json.dumps(row)}) && !!document.querySelector("
                            f"{json.dumps(b_pending)})", what="the queue filter")
        await choose(page, "#pending-queue", "")
        await choose(page, "#pending-namespace", namespace)
        await page.wait_for(f"!!document.querySelector({json.dumps(row)}) && !!document.querySelector("
                            f"{json.dumps(b_pending)})", what="the namespace filter")
        await shots.take("pending")

        await page.click(row)  # its explanation, from /v1/explain (shoal explain's code)
        await page.wait_for(f"({text_of('#explain-verdict')}).startsWith('pending: ')", what="the explanation")
        assert GANG_WORDS in await page.eval(text_of("#explain-verdict"))
        assert (await page.eval(text_of("#explain-queue"))).startswith(f"queue {a}: fair share ")
        await shots.take("explain")
        await page.eval("shoal.closeDetail()")

        # capacity frees: the gang is bound and drawn on the map
        for i in range(2):
            await kube.delete(PODS, f"busy-{i}", namespace=namespace)
        await wait_running(kube, namespace, [f"wide-{i}" for i in range(3)], timeout_s=120)
        await page.wait_for(f"!document.querySelector({json.dumps(row)})", timeout_s=60,
                            what="the gang to leave the pending list")
        await open_tab(page, "gpus")
        await eventually(map_agrees, timeout_s=60, what="the GPU map to show the gang bound")
        drawn = await map_of_pool(page, node_pool)
        assert {f"{namespace}/wide-{i}" for i in range(3)} <= {p for n in nodes for p in drawn[n]["pods"]}

        # the queue tree: a borrows beyond its quota of 1; b's omitted limit is its quota
        await open_tab(page, "queues")
        a_row, b_row = f'#queue-tree tr[data-queue="{a}"]', f'#queue-tree tr[data-queue="{b}"]'
        await page.wait_for(f"({text_of(a_row)}).includes('borrowing 3')", timeout_s=60, what="a's borrowing")
        assert "2 (quota; limit omitted)" in await page.eval(text_of(b_row))
        assert "unlimited" in await page.eval(text_of(a_row))
        assert await page.eval(f"!!document.querySelector('#queue-tree tr[data-queue=\"{dept}\"]')")
        assert await page.eval(f"document.querySelector({json.dumps(a_row)}).className") == "depth2"  # root→dept→a
        await shots.take("queues")

        # b claims its quota from a full cluster: a reclaim, listed with its action and evictor
        await create(kube, podgroup(namespace, "extra", a, node_pool),
                     pod(namespace, "extra-0", a, node_pool, group="extra"))
        await wait_running(kube, namespace, ["extra-0"], timeout_s=120)
        await create(kube, podgroup(namespace, "claim", b, node_pool),
                     pod(namespace, "claim-0", b, node_pool, group="claim"))
        await open_tab(page, "workloads")
        evicted = f'#evicted tr[data-pod^="{namespace}/"]'
        await page.wait_for(f"({text_of(evicted)}).includes({json.dumps(f'{namespace}/claim')})", timeout_s=120,
                            what="the reclaim in the evicted list")
        evicted_text = await page.eval(text_of(evicted))
        assert "reclaim" in evicted_text and a in evicted_text and "was preempted by" in evicted_text
        await wait_running(kube, namespace, ["claim-0"], timeout_s=120)
        claim_row = f'#pending tr[data-pod-group="{namespace}/claim"]'
        await page.wait_for(f"!document.querySelector({json.dumps(claim_row)})", timeout_s=60,
                            what="the claim to leave the pending list")
        await shots.take("evicted")

        await open_tab(page, "history")
        await page.wait_for(f"!!document.querySelector('#history-svg polygon[data-queue=\"{a}\"]')", timeout_s=60,
                            what="the over-time chart with queue a")
        assert await page.eval("!!document.querySelector('#capacity-line') && !!document.querySelector('#util-line')")
        await shots.take("history")

        await open_tab(page, "decisions")
        await page.eval(f"""(() => {{ const f = document.getElementById('decision-filter');
            f.value = {json.dumps(namespace + '/wide')}; f.dispatchEvent(new Event('input')); }})()""")
        await page.wait_for("""(() => { const k = [...document.querySelectorAll('#decisions tbody tr')]
            .map(r => r.className); return k.includes('unschedulable') && k.includes('bound'); })()""",
                            timeout_s=60, what="the gang's decisions in the stream")
        await shots.take("decisions")
        assert page.errors == [], page.errors
    print(f"\nscreenshots: {', '.join(str(p) for p in shots.taken)}")


def big_cluster(nodes: int = 1000, gpus: int = 8) -> Any:
    """A generated shard: `nodes` nodes of `gpus` GPUs, each with whole-GPU pods, one shared GPU (two halves
    and its reservation pod) and a free GPU; 100 pending gangs of 5 in 50 queues (10 departments)."""
    from shoal.core.ingest.shard_model import Entries, PodEntry
    from shoal.core.model import FractionRequest, Node, Pod, PodGroup, Queue, QueueResource

    queues = [Queue(name=f"dept-{d}", gpu=QueueResource(quota=800_000, limit=-1)) for d in range(10)]
    queues += [Queue(name=f"proj-{d}-{p}", parent=f"dept-{d}", gpu=QueueResource(quota=160_000))
               for d in range(10) for p in range(5)]
    node_list, pod_list, groups = [], [], []
    for i in range(nodes):
        name = f"n{i:04d}"
        node_list.append(Node(name=name, pool="pool-big", gpus=gpus, gpu_memory_mib=81_920, cpu_milli=128_000,
                              memory_bytes=2**40, labels={"nvidia.com/gpu.product": "H100"}))
        q = f"proj-{i % 10}-{i % 5}"
        group = f"job-{i // 4}"
        if i % 4 == 0:
            groups.append(PodGroup(namespace="big", name=group, queue=q, min_member=1))
        for k in range(gpus - 2):
            pod_list.append(Pod(uid=f"{name}-{k}", namespace="big", name=f"{name}-w{k}", node_name=name, gpus=1,
                                pod_group=group, phase="Running"))
        gid = f"g-{name}"
        for k in range(2):
            pod_list.append(Pod(uid=f"{name}-f{k}", namespace="big", name=f"{name}-f{k}", node_name=name,
                                fraction=FractionRequest(portion_milli=500), gpu_groups=(gid,), pod_group=group,
                                phase="Running"))
        pod_list.append(Pod(uid=f"{name}-r", namespace="kai-resource-reservation", name=f"r-{name}", node_name=name,
                            gpus=1, gpu_groups=(gid,), phase="Running"))
    for g in range(100):
        groups.append(PodGroup(namespace="big", name=f"wait-{g}", queue=f"proj-{g % 10}-{g % 5}", min_member=5,
                               created=f"2026-01-01T00:{g // 60:02d}:{g % 60:02d}Z"))
        pod_list += [Pod(uid=f"wait-{g}-{k}", namespace="big", name=f"wait-{g}-{k}", gpus=8, pod_group=f"wait-{g}")
                     for k in range(5)]
    return Entries(nodes=tuple(node_list), pods=tuple(PodEntry(pod=p) for p in pod_list),
                   pod_groups=tuple(groups), queues=tuple(queues))


@pytest.fixture
def big_dashboard(shoal: Any, stack: Any) -> Iterator[tuple[str, str]]:
    """An api of its own on an empty Redis database (the stack's server, db 7) holding only the generated shard."""
    import asyncio

    from shoal.adapters.redis_client import connect_redis
    from shoal.adapters.shard_snapshots import SnapshotWriter
    from shoal.settings import RedisSettings

    url = stack.redis_url.rsplit("/", 1)[0] + "/7"

    async def store() -> None:
        redis = connect_redis(RedisSettings(url=url))
        try:
            await redis.flushdb()
            assert await SnapshotWriter(redis).publish_base("pool-big", 1, big_cluster(),
                                                            taken_at="2026-01-01T00:00:00Z")
        finally:
            await redis.aclose()

    asyncio.run(store())
    yield from ((u, url) for u in launch_api(shoal, stack, SHOAL_REDIS_URL=url,
                                             SHOAL_TOPIC_PREFIX=f"big{uuid.uuid4().hex[:6]}."))


async def test_a_1000_node_snapshot_renders_and_its_time_is_reported(big_dashboard, tmp_path):
    await _render_big(big_dashboard[0], tmp_path)


async def _render_big(url: str, tmp_path: Path) -> None:
    async with Browser.launch(tmp_path) as page:
        shots = Shots(page, tmp_path / "screenshots")
        await page.goto(url)
        await page.wait_for("shoal.timings.gpuMapNodes === 1000", timeout_s=120, what="the 1,000-node GPU map")
        first = await page.eval("({ms: shoal.timings.gpuMapRenderMs, cells: shoal.timings.gpuMapCells,"
                                " loaded: performance.now()})")
        assert first["cells"] == 200 * 8  # one page of 200 nodes, 8 GPUs each
        assert "1–200 of 1000" in await page.eval(text_of("#gpu-pager"))
        summary = await page.eval(text_of("#summary"))
        assert "1000 nodes" in summary and "8000 GPUs" in summary and "7000 GPUs in use (88%)" in summary
        await shots.take("big-gpu-map")
        # the same answer drawn again, timed: the fetch left out, every page once
        timing = await page.eval("""(async () => {
            const data = await shoal.getJSON('v1/cluster'); const t0 = performance.now();
            const first = shoal.gpuMap.renderData(data); const pages = [first];
            for (let i = 1; i < 5; i++) { document.querySelector('#gpu-pager button:last-child').click();
              pages.push(shoal.timings.gpuMapRenderMs); }
            return {first, pages, all: performance.now() - t0, bytes: JSON.stringify(data).length}; })()""")
        await page.eval("""(() => { const f = document.getElementById('gpu-filter'); f.value = 'n0999';
            f.dispatchEvent(new Event('input')); })()""")
        assert await page.eval("document.querySelectorAll('#gpu-map .node').length") == 1
        await page.click("#tabs button[data-tab=workloads]")
        await page.wait_for(f"({text_of('#pending-count')}) === '(100)'", what="100 pending gangs")
        assert await page.eval("document.querySelectorAll('#pending tbody tr').length") == 50  # paged
        await shots.take("big-pending")
        assert page.errors == [], page.errors
    report = {"nodes": 1000, "gpus": 8000, "pods": 9500, "firstPageRenderMs": round(first["ms"], 1),
              "loadToMapMs": round(first["loaded"], 1), "pagesRenderMs": [round(p, 1) for p in timing["pages"]],
              "allPagesMs": round(timing["all"], 1), "clusterJsonBytes": timing["bytes"]}
    (tmp_path / "render-time.json").write_text(json.dumps(report, indent=2))
    print(f"\n1,000-node GPU map render: {json.dumps(report)}")
