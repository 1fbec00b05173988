"""A fake kubelet for the fake GPU nodes: a test/dev component, run as its own process.

    python -m shoal.devstack.fakekubelet --kubeconfig PATH [--delete-delay 1.0] [--ready-file PATH]
        [--concurrency 32] [--node-selector shoal.io/fake-node=true]

For pods bound to a node matching the selector (by default labelled `shoal.io/fake-node=true`):
- a Pending pod is marked Running (phase, PodScheduled/Initialized/ContainersReady/Ready, containerStatuses,
  startTime, hostIP, podIP);
- a Running pod annotated `shoal.io/run-seconds: "<n>"` ends n seconds after its startTime: Succeeded, or
  Failed when `shoal.io/exit-code` is non-zero;
- a pod being gracefully deleted is deleted with grace 0 after min(its grace period, --delete-delay) seconds.
Pods and nodes are listed then watched (re-listed on 410 Gone or a broken watch); status patches go through a
bounded pool of concurrent requests, coalesced per pod, so hundreds of pods do not queue up one by one.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from shoal.adapters import kube as k
from shoal.devstack.nodes import FAKE_NODE_LABEL
from shoal.devstack.podstatus import PodView, finished_status, running_status
from shoal.devstack.watch import Relist, list_all, watch_from

RUN_SECONDS = "shoal.io/run-seconds"
EXIT_CODE = "shoal.io/exit-code"
log = logging.getLogger("shoal.fakekubelet")


@dataclass
class FakeKubelet:
    core: client.CoreV1Api
    delete_delay_s: float = 1.0
    concurrency: int = 32
    node_selector: str = f"{FAKE_NODE_LABEL}=true"
    nodes: set[str] = field(default_factory=set)
    # nodes once fake and since deleted: graceful deletes of their pods still finish (else a test's namespace,
    # deleted after its nodes, would stay Terminating)
    gone_nodes: set[str] = field(default_factory=set)
    pods: dict[str, PodView] = field(default_factory=dict)
    finish_timers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    delete_timers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    launched: dict[str, float] = field(default_factory=dict)  # uid -> when we marked it Running (epoch s)
    wanted: dict[str, str] = field(default_factory=dict)  # uid -> "run" | "finish"
    queue: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    ip_counter: int = 0

    # ---- decisions -------------------------------------------------------------------------------------
    def reconcile(self, pod: PodView) -> None:
        if pod.node not in self.nodes:
            if pod.deleting and pod.node in self.gone_nodes and pod.uid not in self.delete_timers:
                self.delete_timers[pod.uid] = asyncio.ensure_future(self._later(0.0, self._delete, pod))
            return
        if pod.deleting:
            if pod.uid not in self.delete_timers:
                _cancel(self.finish_timers.pop(pod.uid, None))
                delay = min(pod.grace_s, self.delete_delay_s)
                self.delete_timers[pod.uid] = asyncio.ensure_future(self._later(delay, self._delete, pod))
            return
        if pod.phase == "Pending":
            if pod.uid not in self.launched:
                self._want(pod.uid, "run")
        elif pod.phase == "Running" and RUN_SECONDS in pod.annotations and pod.uid not in self.finish_timers:
            try:
                seconds = float(pod.annotations[RUN_SECONDS])
            except ValueError:
                log.warning(
                    "bad %s=%r on %s/%s", RUN_SECONDS, pod.annotations[RUN_SECONDS], pod.namespace, pod.name
                )
                return
            # startTime has whole seconds only: prefer the exact moment this process marked the pod Running
            started = self.launched.get(pod.uid) or _epoch(pod.start_time)
            delay = max(0.0, seconds - (time.time() - started)) if started else seconds
            self.finish_timers[pod.uid] = asyncio.ensure_future(self._later(delay, self._finish, pod))

    def forget(self, uid: str) -> None:
        self.pods.pop(uid, None)
        self.wanted.pop(uid, None)
        self.launched.pop(uid, None)
        _cancel(self.finish_timers.pop(uid, None))
        _cancel(self.delete_timers.pop(uid, None))

    def _want(self, uid: str, action: str) -> None:
        if uid not in self.wanted:
            self.queue.put_nowait(uid)
        self.wanted[uid] = action

    async def _later(self, delay: float, fn: Callable[[PodView], Awaitable[None]], pod: PodView) -> None:
        await asyncio.sleep(delay)
        await fn(self.pods.get(pod.uid, pod))

    async def _finish(self, pod: PodView) -> None:
        self._want(pod.uid, "finish")

    async def _delete(self, pod: PodView) -> None:
        try:
            await self.core.delete_namespaced_pod(
                pod.name,
                pod.namespace,
                grace_period_seconds=0,
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": pod.uid}},
                _preload_content=False,
            )
            log.info("deleted %s/%s", pod.namespace, pod.name)
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("delete %s/%s failed: %s %s", pod.namespace, pod.name, exc.status, exc.reason)

    # ---- status patch workers ----------------------------------------------------------------------------
    async def worker(self) -> None:
        while True:
            uid = await self.queue.get()
            action = self.wanted.pop(uid, None)
            pod = self.pods.get(uid)
            if action is None or pod is None or pod.deleting:
                continue
            try:
                await self._patch(pod, action)
            except Exception as exc:  # noqa: BLE001 - one pod's failure must not stop the worker
                log.warning(
                    "patch %s/%s (%s) failed, retrying in 1s: %s", pod.namespace, pod.name, action, exc
                )
                asyncio.get_running_loop().call_later(1.0, self._want, uid, action)

    async def _patch(self, pod: PodView, action: str) -> None:
        if action == "run":
            if pod.phase != "Pending":
                return
            self.ip_counter += 1
            n = self.ip_counter
            status = running_status(pod, f"10.244.{(n // 250) % 250}.{n % 250 + 1}")
        else:
            if pod.phase != "Running":
                return
            try:
                code = int(pod.annotations.get(EXIT_CODE, "0"))
            except ValueError:
                code = 1
            status = finished_status(pod, code)
        body = {"metadata": {"uid": pod.uid}, "status": status}
        for attempt in range(3):
            try:
                await self.core.patch_namespaced_pod_status(
                    pod.name,
                    pod.namespace,
                    body,
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
                if action == "run":
                    self.launched[pod.uid] = time.time()
                log.info("%s %s/%s", status["phase"].lower(), pod.namespace, pod.name)
                return
            except ApiException as exc:
                if exc.status in (404, 409, 422) or attempt == 2:
                    if exc.status not in (404, 409):
                        log.warning("patch %s/%s: %s %s", pod.namespace, pod.name, exc.status, exc.reason)
                    return
                await asyncio.sleep(0.2 * (attempt + 1))

    # ---- list + watch -------------------------------------------------------------------------------------
    async def run_nodes(self, ready: asyncio.Event) -> None:
        async def on_list(items: list[dict[str, Any]]) -> None:
            listed = {n["metadata"]["name"] for n in items}
            self.gone_nodes |= self.nodes - listed
            self.nodes = listed
            for pod in list(self.pods.values()):
                self.reconcile(pod)

        async def on_event(kind: str, obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            if kind == "DELETED":
                self.nodes.discard(name)
                self.gone_nodes.add(name)
            elif name not in self.nodes:
                self.nodes.add(name)
                self.gone_nodes.discard(name)
                for pod in list(self.pods.values()):
                    if pod.node == name:
                        self.reconcile(pod)

        await self._list_watch(
            self.core.list_node, {"label_selector": self.node_selector}, on_list, on_event, ready
        )

    async def run_pods(self, ready: asyncio.Event) -> None:
        async def on_list(items: list[dict[str, Any]]) -> None:
            seen = set()
            for raw in items:
                pod = PodView.of(raw)
                seen.add(pod.uid)
                self.pods[pod.uid] = pod
                self.reconcile(pod)
            for uid in [u for u in self.pods if u not in seen]:
                self.forget(uid)

        async def on_event(kind: str, obj: dict[str, Any]) -> None:
            pod = PodView.of(obj)
            if kind == "DELETED":
                self.forget(pod.uid)
                return
            self.pods[pod.uid] = pod
            self.reconcile(pod)

        await self._list_watch(
            self.core.list_pod_for_all_namespaces,
            {"field_selector": "spec.nodeName!="},
            on_list,
            on_event,
            ready,
        )

    async def _list_watch(
        self, fn: Any, selector: dict[str, str], on_list: Any, on_event: Any, ready: asyncio.Event
    ) -> None:
        while True:
            try:
                items, rv = await list_all(fn, selector)
                await on_list(items)
                ready.set()
                while True:
                    rv = await watch_from(fn, selector, rv, on_event)
            except Relist:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - apiserver restart, network hiccup: list again
                log.warning("watch via %s broke (%s); listing again in 0.5s", fn.__name__, exc)
                await asyncio.sleep(0.5)


def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()


def _epoch(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


async def serve(
    kubeconfig: str,
    delete_delay_s: float,
    ready_file: str | None,
    concurrency: int = 32,
    node_selector: str = f"{FAKE_NODE_LABEL}=true",
) -> None:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = concurrency + 8
    async with client.ApiClient(cfg) as api:
        api.user_agent = k.user_agent("fakekubelet")
        k.skip_proxy_lookup(api)  # the harness leaves the machine's CPU to the scheduler it measures
        kubelet = FakeKubelet(
            client.CoreV1Api(api),
            delete_delay_s=delete_delay_s,
            concurrency=concurrency,
            node_selector=node_selector,
        )
        nodes_ready, pods_ready = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.ensure_future(kubelet.worker()) for _ in range(concurrency)]
        tasks.append(asyncio.ensure_future(kubelet.run_nodes(nodes_ready)))
        await nodes_ready.wait()
        tasks.append(asyncio.ensure_future(kubelet.run_pods(pods_ready)))
        await pods_ready.wait()
        log.info("ready: %d fake nodes, %d bound pods", len(kubelet.nodes), len(kubelet.pods))
        if ready_file:
            Path(ready_file).write_text(f"{os.getpid()}\n")  # names this process: a stale file is no signal
        await asyncio.gather(*tasks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shoal.devstack.fakekubelet", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument(
        "--delete-delay", type=float, default=1.0, help="max seconds before a graceful delete ends"
    )
    parser.add_argument("--concurrency", type=int, default=32, help="status patches in flight at once")
    parser.add_argument(
        "--ready-file", help="gets this process's pid once the first list of nodes and pods is done"
    )
    parser.add_argument(
        "--node-selector",
        default=f"{FAKE_NODE_LABEL}=true",
        help="label selector of the nodes to play kubelet for",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    try:
        asyncio.run(
            serve(args.kubeconfig, args.delete_delay, args.ready_file, args.concurrency, args.node_selector)
        )
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # noqa: BLE001 - one clear line, no traceback
        print(f"fakekubelet: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
