"""The verbs of `kubectl shoal` (shoal.cli.kubectl): each asks the api service first and reads the cluster
directly when none answers, saying so on stderr. The renderings are those of `shoal explain`, `shoal queues`
and `shoal events` (shoal.core.explanation, shoal.cli.events), with kubectl's -o json|yaml|wide on top.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import urllib.parse
from typing import Any

import yaml

from shoal.adapters import kube as k
from shoal.adapters.explain import CORE_EVENTS
from shoal.cli import kubectl_cluster as cluster
from shoal.cli.explain import Unreachable, split_target
from shoal.cli.kubectl import emit, warn
from shoal.cli.kubectl_api import CONNECTED, Api
from shoal.core.explanation import describe, limit_note, queue_line, render, render_queues
from shoal.settings import KubeSettings

POLL_S = 2.0  # how often `events --follow` lists the events again without an api service


async def run(args: argparse.Namespace) -> int:
    api_client = await k.connect_kube(KubeSettings(kubeconfig=str(args.kubeconfig_path) if args.kubeconfig_path
                                                   else None, context=args.context,
                                                   request_timeout_s=args.request_timeout))
    try:
        kube = k.Kube(api_client, request_timeout_s=args.request_timeout)
        api = Api(kube, url=args.api, service=args.api_service, timeout_s=args.request_timeout)
        verb = {"explain": explain, "queues": queues, "events": events, "top": top}[args.verb]
        return await verb(args, kube, api)
    finally:
        await api_client.close()


def _direct(args: argparse.Namespace, exc: Unreachable, what: str) -> None:
    warn(f"{args.verb}: no api service ({exc}); reading {what} from the cluster directly")


# ---- explain ---------------------------------------------------------------------------------------
async def explain(args: argparse.Namespace, kube: k.Kube, api: Api) -> int:
    from shoal.adapters.explain import explain as explanation

    namespace, name = split_target(args.target, args.namespace)
    if not namespace or not name or "/" in name:
        warn(f"explain: cannot read {args.target!r}: give NAME with -n NAMESPACE, or NAMESPACE/NAME")
        return 1
    try:
        status, answer = await api.get(f"/v1/explain/{urllib.parse.quote(namespace)}/{urllib.parse.quote(name)}")
    except Unreachable as exc:
        _direct(args, exc, "the pod, its PodGroup, its Queue and events")
        answer = await explanation(kube, None, namespace, name)
        await _queue_figures(kube, answer)
        status = 200 if answer.get("found") else 404
    if not isinstance(answer, dict) or "verdict" not in answer:
        error = answer.get("error") if isinstance(answer, dict) else answer
        warn(f"explain: the api service answered {status}: {error}")
        return 1
    if not answer.get("found", True) and not answer.get("decisions"):
        warn(f"explain: no pod or pod group {namespace}/{name}")
        return 1
    emit(answer, args.output, lambda wide: render(answer))
    return 0 if status == 200 else 1


async def _queue_figures(kube: k.Kube, answer: dict) -> None:
    """Without the api: the queue's figures from its status (written by Shoal's binder) and spec."""
    if not answer.get("queue"):
        return
    try:
        queue = await kube.get(k.QUEUES, answer["queue"])
    except Exception:  # noqa: BLE001 - no such queue: explain says so already
        return
    figures = cluster.queue_figures(queue)
    for resource, f in figures.items():
        f["limitNote"] = limit_note(queue, resource, f)
    answer["queueFigures"] = figures
    answer["queueLine"] = queue_line(answer["queue"], figures, queue) + " (from the Queue's status)"


# ---- queues ----------------------------------------------------------------------------------------
async def _queues_answer(args: argparse.Namespace, kube: k.Kube, api: Api) -> dict:
    try:
        status, body = await api.get("/v1/queues")
        if status == 200 and isinstance(body, dict) and "shards" in body:
            return body
        raise Unreachable(f"answered {status}: {body.get('error') if isinstance(body, dict) else body}")
    except Unreachable as exc:
        _direct(args, exc, "Queues and pods")
        queues_list, _ = await kube.list(k.QUEUES)
        pods, _ = await kube.list(k.PODS)
        return cluster.queues_answer(queues_list, pods)


def queues_table(shards: dict, wide: bool) -> str:
    if not wide:
        return render_queues(shards)
    header = ("SHARD", "QUEUE", "GPU DESERVED", "GPU FAIR", "GPU ALLOC", "GPU ALLOC NONPREEMPT", "GPU LIMIT",
              "GPU REQ", "CPU DESERVED", "CPU FAIR", "CPU ALLOC", "CPU LIMIT", "MEM FAIR", "MEM ALLOC", "MEM LIMIT")
    rows = []
    for shard in sorted(shards):
        for name, f in sorted(shards[shard]["queues"].items()):
            g, c, m = f["gpu"], f["cpu"], f["memory"]
            rows.append((shard, name, g["deserved"], g["fairShare"], g["allocated"], g["allocatedNonPreemptible"],
                         g["limit"], g["request"], c["deserved"], c["fairShare"], c["allocated"], c["limit"],
                         m["fairShare"], m["allocated"], m["limit"]))
    return table(header, rows) if rows else "no fair-share figures published yet"


def table(header: tuple, rows: list[tuple]) -> str:
    """kubectl's plain table: upper-case header, columns padded with spaces, -1 shown as unlimited."""
    cells = [header, *[tuple("unlimited" if v == -1 else str(v) for v in r) for r in rows]]
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    return "\n".join("   ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells)


async def queues(args: argparse.Namespace, kube: k.Kube, api: Api) -> int:
    body = await _queues_answer(args, kube, api)
    emit(body, args.output, lambda wide: queues_table(body["shards"], wide))
    return 0


# ---- events ----------------------------------------------------------------------------------------
def _in_scope(args: argparse.Namespace, subject: str) -> bool:
    return args.all_namespaces or subject.startswith(f"{args.namespace}/")


def _print_one(args: argparse.Namespace, document: dict, line: str) -> None:
    if args.output == "json":
        print(json.dumps(document, sort_keys=True), flush=True)
    elif args.output == "yaml":
        print("---\n" + yaml.safe_dump(document, sort_keys=True).rstrip(), flush=True)
    else:
        print(line, flush=True)


def decision_line(event: dict, wide: bool) -> str:
    line = describe(event)
    return f"{line}  [shard {event.get('shard', '')}, {event.get('source', '')}]" if wide else line


async def events(args: argparse.Namespace, kube: k.Kube, api: Api) -> int:
    """The last decisions (at most --limit, of every namespace, then those in scope); with --follow the stream is
    subscribed first, so nothing between the two is missed (duplicates are dropped by id)."""
    stream = api.stream("/v1/decisions") if args.follow else None
    try:
        if stream is not None:
            await anext(stream)  # CONNECTED
        status, body = await api.get(f"/v1/decisions/recent?limit={max(1, args.limit)}")
        if status != 200 or not isinstance(body, dict) or "decisions" not in body:
            raise Unreachable(f"answered {status}")
    except (Unreachable, StopAsyncIteration) as exc:
        if stream is not None:
            await stream.aclose()
        _direct(args, exc if isinstance(exc, Unreachable) else Unreachable("the stream ended"), "Shoal's events")
        return await _cluster_events(args, kube)
    seen = set()
    for event in body["decisions"]:
        seen.add(event.get("id"))
        if _in_scope(args, event.get("subject", "")):
            _print_one(args, event, decision_line(event, args.output == "wide"))
    if stream is not None:
        async for event in stream:
            if event is not CONNECTED and event.get("id") not in seen and _in_scope(args, event.get("subject", "")):
                _print_one(args, event, decision_line(event, args.output == "wide"))
    return 0


def event_line(event: dict, wide: bool) -> str:
    line = (f"{event['time']:<20} {event['type']:<7} {event['reason']:<14} {event['namespace']}/{event['object']}"
            f"  {event['message']}")
    return f"{line}  (x{event['count']})" if wide else line


async def _cluster_events(args: argparse.Namespace, kube: k.Kube) -> int:
    namespace = None if args.all_namespaces else args.namespace
    shown: set[tuple] = set()
    while True:
        items, _ = await kube.list(CORE_EVENTS, namespace=namespace)
        for event in cluster.shoal_events(items):
            key = (event["namespace"], event["object"], event["reason"], event["message"], event["time"])
            if key not in shown:
                shown.add(key)
                _print_one(args, event, event_line(event, args.output == "wide"))
        if not args.follow:
            return 0
        await asyncio.sleep(POLL_S)


# ---- top -------------------------------------------------------------------------------------------
def top_queues_table(shards: dict, wide: bool) -> str:
    header = ("QUEUE", "SHARD", "GPU ALLOC", "GPU FAIR", "GPU DESERVED", "GPU LIMIT", "GPU%")
    if wide:
        header += ("GPU REQ", "CPU ALLOC", "CPU FAIR", "MEM ALLOC")
    rows = []
    for shard in sorted(shards):
        for name, f in sorted(shards[shard]["queues"].items()):
            g = f["gpu"]
            share = f"{round(100 * g['allocated'] / g['fairShare'])}%" if g["fairShare"] not in (0, -1) else "-"
            row: tuple = (name, shard, g["allocated"], g["fairShare"], g["deserved"], g["limit"], share)
            if wide:
                row += (g["request"], f["cpu"]["allocated"], f["cpu"]["fairShare"], f["memory"]["allocated"])
            rows.append(row)
    return table(header, rows) if rows else "no queues"


def top_nodes_table(rows: list[dict], wide: bool) -> str:
    header = ("NODE", "POOL", "GPUS", "GPU USED", "GPU FREE", "GPU%")
    if wide:
        header += ("WHOLE", "SHARED", "PORTIONS", "GPU PODS")
    out = []
    for r in rows:
        row: tuple = (r["node"], r["pool"], r["gpus"], r["used"], r["free"], f"{round(100 * r['used'] / r['gpus'])}%")
        if wide:
            row += (r["whole"], r["shared"], r["portions"], r["pods"])
        out.append(row)
    return table(header, out) if out else "no GPU nodes"


async def top(args: argparse.Namespace, kube: k.Kube, api: Api) -> int:
    document: dict[str, Any] = {}
    if args.what in (None, "queues"):
        document["queues"] = (await _queues_answer(args, kube, api))["shards"]
    if args.what in (None, "nodes"):
        nodes, _ = await kube.list(k.NODES)
        pods, _ = await kube.list(k.PODS, field_selector="status.phase!=Succeeded,status.phase!=Failed")
        document["nodes"] = cluster.node_rows(nodes, pods)

    def tables(wide: bool) -> str:
        parts = []
        if "queues" in document:
            parts.append(top_queues_table(document["queues"], wide))
        if "nodes" in document:
            parts.append(top_nodes_table(document["nodes"], wide))
        return "\n\n".join(parts)

    emit(document, args.output, tables)
    return 0
