"""The dashboard's pure parts: the GPU map, the queue tree, the pending and evicted lists, the bounded history."""

from __future__ import annotations

import aiohttp

from services.api.decisions import DecisionIndex
from services.api.gpumap import gpu_map, summary
from services.api.history import OTHER, History
from services.api.queuetree import queue_tree
from services.api.views import Views
from services.api.workloads import Evictions, page, pending
from shoal.adapters.http import build_app, serve
from shoal.adapters.shard_snapshots import Current
from shoal.core.ingest.shard_model import PodEntry, ShardModel
from shoal.core.model import FractionRequest, Node, Pod, PodGroup, Queue, QueueResource

RES = "kai-resource-reservation"


def pod(name: str, *, ns: str = "team", node: str | None = None, gpus: int = 0, group: str = "", **kw) -> PodEntry:
    return PodEntry(pod=Pod(uid=f"uid-{ns}-{name}", namespace=ns, name=name, node_name=node, gpus=gpus,
                            pod_group=group, **kw))


def model() -> ShardModel:
    m = ShardModel()
    m.nodes = {"n1": Node(name="n1", pool="pool-a", gpus=4, gpu_memory_mib=80_000),
               "n2": Node(name="n2", pool="pool-a", gpus=2, ready=False)}
    m.queues = {"dept": Queue(name="dept", gpu=QueueResource(quota=4000, limit=None)),
                "proj": Queue(name="proj", parent="dept", gpu=QueueResource(quota=2000, limit=-1, weight=2.0)),
                "orphan": Queue(name="orphan", parent="missing")}
    m.pod_groups = {"team/train": PodGroup(namespace="team", name="train", queue="proj", min_member=2,
                                           created="2026-01-01T00:00:01Z"),
                    "team/gang": PodGroup(namespace="team", name="gang", queue="proj", min_member=3,
                                          created="2026-01-01T00:00:05Z"),
                    "team/old": PodGroup(namespace="team", name="old", queue="dept", created="2026-01-01T00:00:00Z",
                                         condition_reason="OverLimit")}
    half = FractionRequest(portion_milli=500)
    entries = [pod("train-0", node="n1", gpus=1, group="train"), pod("train-1", node="n1", gpus=1, group="train",
                                                                     deleting=True),
               pod("infer-0", node="n1", group="train", fraction=half, gpu_groups=("g1",)),
               pod("r-g1", ns=RES, node="n1", gpus=1, gpu_groups=("g1",)),
               pod("gang-0", group="gang", gpus=1), pod("gang-1", group="gang", gpus=1),
               pod("gang-2", group="gang", gpus=1, nominated_node="n1"),
               pod("old-0", group="old", gpus=1),
               pod("done", node="n1", gpus=1, phase="Succeeded")]
    m.pods = {e.pod.uid: e for e in entries}
    return m


def test_gpu_map_draws_whole_shared_releasing_pipelined_and_free_cells():
    nodes = gpu_map(model(), reservation_namespace=RES)
    n1, n2 = nodes
    assert [c["state"] for c in n1["cells"]] == ["whole", "releasing", "shared", "free"]
    assert n1["cells"][0]["pods"][0] == {"pod": "team/train-0", "queue": "proj", "podGroup": "team/train",
                                         "phase": "Pending", "releasing": False}
    shared = n1["cells"][2]
    assert shared["reservation"] == f"{RES}/r-g1" and shared["usedMilli"] == 500
    assert [p["pod"] for p in shared["parts"]] == ["team/infer-0"]
    assert n1["cells"][1]["pipelined"] and [p["pod"] for p in n1["pipelined"]] == ["team/gang-2"]
    assert n2["cells"] == [{"state": "free"}] * 2 and n2["ready"] is False
    assert summary(nodes) == {"nodes": 2, "gpus": 6, "cells": {"whole": 1, "shared": 1, "releasing": 1, "free": 3},
                              "gpusInUse": 2.5}


def test_gpu_map_of_an_empty_model_and_a_node_with_more_pods_than_gpus():
    assert gpu_map(ShardModel()) == [] and summary([]) == {"nodes": 0, "gpus": 0, "gpusInUse": 0,
                                                           "cells": {"whole": 0, "shared": 0, "releasing": 0,
                                                                     "free": 0}}
    m = ShardModel()
    m.nodes = {"n": Node(name="n", gpus=1)}
    m.pods = {e.pod.uid: e for e in [pod("a", node="n", gpus=1), pod("b", node="n", gpus=1),
                                     pod("c", node="n", fraction=FractionRequest(gpu_memory_mib=10),
                                         gpu_groups=("g",))]}
    cells = gpu_map(m)[0]["cells"]  # over-committed data is drawn as it is, never a crash
    assert [c["state"] for c in cells] == ["whole", "whole", "shared"] and cells[2]["usedMilli"] == 0


def test_queue_tree_nests_projects_and_explains_the_effective_limit():
    figures = {"pool-a": {"revision": 3, "producedAt": "t", "queues": {
        "proj": {"gpu": {"deserved": 2, "fairShare": 3, "allocated": 3, "limit": -1, "request": 4,
                         "allocatedNonPreemptible": 1}},
        "dept": {"gpu": {"deserved": 4, "fairShare": 4, "allocated": 3, "limit": 4, "request": 4,
                         "allocatedNonPreemptible": 1}},
        "ghost": {"gpu": {"deserved": 0, "fairShare": 0, "allocated": 0, "limit": 0, "request": 0}}}}}
    tree = queue_tree(model().queues.values(), figures)["pool-a"]
    roots = {r["name"]: r for r in tree["roots"]}
    assert set(roots) == {"dept", "ghost"} and tree["revision"] == 3
    dept = roots["dept"]
    assert dept["resources"]["gpu"]["limitNote"] == "4 (quota; limit omitted)" and dept["resources"]["gpu"]["quota"] == 4
    proj = dept["children"][0]
    assert proj["name"] == "proj" and proj["resources"]["gpu"]["borrowed"] == 1
    assert proj["resources"]["gpu"]["limitNote"] == "unlimited" and proj["resources"]["gpu"]["overQuotaWeight"] == 2.0
    assert roots["ghost"]["inSnapshot"] is False and roots["ghost"]["resources"]["gpu"]["limitNote"] == "0"
    alone = queue_tree(model().queues.values(), {})[""]["roots"]  # no figures yet: the queues alone
    assert {r["name"] for r in alone} == {"dept", "orphan"}  # a missing parent makes a root
    assert queue_tree([], {}) == {}


def test_pending_lists_waiting_groups_newest_first_with_their_reason():
    index = DecisionIndex()
    index.add({"id": "1", "type": "io.shoal.decision.unschedulable", "subject": "team/gang", "time": "t1",
               "data": {"podGroup": "team/gang", "reason": "PodSchedulingErrors",
                        "message": "Resources were found for 2 pods while 3 are required for gang scheduling"}})
    shards = {"pool-a": Current(revision=1, chain="c", taken_at="t", model=model())}
    figures = {"pool-a": {"queues": {"proj": {"gpu": {"deserved": 2, "fairShare": 3, "allocated": 3, "limit": -1,
                                                      "request": 4}, "cpu": {"request": 0}}}}}
    items = pending(shards, decisions_for=index.about, figures=figures)
    assert [i["podGroup"] for i in items] == ["team/gang", "team/old"]  # train is running: not pending
    gang, old = items
    assert (gang["pending"], gang["pipelined"], gang["minMember"], gang["reason"]) == (2, 1, 3, "PodSchedulingErrors")
    assert "while 3 are required" in gang["message"] and gang["verdictTime"] == "t1"
    assert gang["queueLine"] == "queue proj: fair share 3 GPUs, allocated 3, limit unlimited, deserved 2, requested 4"
    assert old["reason"] == "OverLimit" and old["message"] == "" and "no fair-share figures yet" in old["queueLine"]
    assert page(items, {"queue": "dept"})["items"] == [old]
    paged = page(items, {"limit": "1", "offset": "1", "namespace": "team"})
    assert (paged["total"], paged["items"], paged["queues"]) == (2, [old], ["dept", "proj"])
    assert page(items, {"limit": "x", "offset": "-3"})["offset"] == 0  # bad values read as defaults
    assert paged["all"] == 2 and page(items, {"queue": "dept"})["all"] == 2

    index.add({"id": "2", "type": "io.shoal.decision.pipelined", "subject": "team/gang-0", "time": "t2",
               "data": {"podGroup": "team/gang", "node": "n1"}})
    gang = pending(shards, decisions_for=index.about, figures=figures)[0]
    assert (gang["reason"], gang["message"]) == ("", "team/gang-0 pipelined onto n1: waiting for the resources "
                                                     "being freed there")
    index.add({"id": "3", "type": "io.shoal.decision.unschedulable", "subject": "team/gang", "time": "t3",
               "data": {"podGroup": "team/gang", "reason": "OverLimit", "message": "OverLimit: q …"}})
    assert pending(shards, decisions_for=index.about, figures=figures)[0]["reason"] == "OverLimit"  # newer verdict


def test_evictions_are_bounded_deduplicated_and_carry_action_evictor_and_queue():
    evictions = Evictions(size=2)
    for i in range(3):
        evictions.add({"id": str(i), "type": "io.shoal.decision.evicted", "subject": f"team/train-{i}",
                       "shard": "pool-a", "time": f"t{i}",
                       "data": {"podGroup": "team/train", "action": "reclaim", "by": "team/gang", "message": "m"}})
    evictions.add({"id": "2", "type": "io.shoal.decision.evicted", "subject": "team/train-2", "data": {}})
    evictions.add({"id": "9", "type": "io.shoal.decision.bound", "subject": "team/x"})
    listed = evictions.list({"pool-a": Current(revision=1, chain="c", taken_at="t", model=model())})
    assert [e["pod"] for e in listed] == ["team/train-2", "team/train-1"]
    assert listed[0]["action"] == "reclaim" and listed[0]["by"] == "team/gang" and listed[0]["queue"] == "proj"
    assert evictions.list({})[0]["queue"] is None  # shard gone: no queue, no error


def test_history_is_a_ring_buffer_with_decision_counts_and_a_queue_cap():
    history = History(size=3, interval_s=10, max_queues=2)
    for i in range(5):
        history.count({"type": "io.shoal.decision.bound"})
        history.add(float(i), 8, {"a": 1.0, "b": 2.0, "c": 0.5})
    data = history.json()
    assert len(data["samples"]) == 3 and [s["t"] for s in data["samples"]] == [2.0, 3.0, 4.0]
    last = data["samples"][-1]
    assert last["queues"] == {"b": 2.0, "a": 1.0, OTHER: 0.5} and last["allocated"] == 3.5
    assert last["decisions"] == {"bound": 1} and history.json(since=3.0)["samples"] == [last]
    sample = history.sample(9.0, {"pool-a": Current(revision=1, chain="c", taken_at="t", model=model())}, RES)
    assert sample["capacity"] == 4 and sample["queues"] == {"proj": 2.5}  # n2 is not ready; reservation left out


async def test_dashboard_endpoints_without_redis_answer_503_and_the_page_is_served():
    from services.api import dashboard

    views = Views(index=DecisionIndex())
    app = build_app()
    views.routes(app)

    async def index(request):
        return dashboard.index_page()

    app.router.add_get("/", index)
    dashboard.routes(app)
    async with serve(app) as port, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{port}"
        for path in ("/v1/cluster", "/v1/queue-tree", "/v1/pending", "/v1/evictions"):
            async with http.get(base + path) as resp:
                assert resp.status == 503 and "no Redis" in (await resp.json())["error"]
        async with http.get(base + "/v1/history?since=x") as resp:
            assert resp.status == 400
        async with http.get(base + "/v1/history") as resp:
            assert (await resp.json()) == {"intervalS": 10.0, "size": 360, "samples": []}
        async with http.get(base + "/") as resp:
            page_text = await resp.text()
            assert resp.status == 200 and 'id="gpu-map"' in page_text
        for name in ("util.js", "gpumap.js", "queues.js", "workloads.js", "history.js", "stream.js", "app.js",
                     "dashboard.css"):
            assert f"static/{name}" in page_text
            async with http.get(f"{base}/static/{name}") as resp:
                assert resp.status == 200 and len(await resp.read()) > 500
