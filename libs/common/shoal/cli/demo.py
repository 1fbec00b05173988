"""`shoal demo`: the whole of Shoal on this machine, in one command.

Starts the local cluster (etcd, kube-apiserver, controller-manager, fake kubelet, 2 fake nodes × 2 GPUs),
Kafka and Redis (see `shoal dev up`), then every Shoal service as its own process (snapshotter, fairshare,
planner, binder, nodeagent), submits a demo workload and streams the scheduling decisions to the terminal:
a 5-pod gang stays Pending ("Resources were found for 4 pods while 5 are required for gang scheduling…")
and a 3-pod gang is bound whole. Ctrl-C stops everything. With SHOAL_KUBECONFIG, SHOAL_KAFKA_BOOTSTRAP and
SHOAL_REDIS_URL set, it uses that running stack instead of starting one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

GANG_MESSAGE = "Resources were found for 4 pods while 5 are required for gang scheduling"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from shoal.devstack.paths import default_state_dir

    parser = subparsers.add_parser("demo", help="start the local cluster, every service and a demo workload",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", type=Path, default=default_state_dir(),
                        help=f"state directory of the local stack (default {default_state_dir()})")
    parser.add_argument("--exit-when-done", action="store_true",
                        help="stop once both gangs reached their expected state (exit 0), or after --timeout")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait with --exit-when-done")
    parser.add_argument("--keep", action="store_true", help="leave the stack and services running at the end")
    parser.set_defaults(func=run)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from shoal.devstack import DevStackError, StackInfo, down, up
    from shoal.devstack.errors import MissingTools
    from shoal.devstack.procs import free_port, stop_process
    from shoal.devstack.scheduler import SERVICES, start_services

    try:
        attached = StackInfo.from_env()
    except DevStackError as exc:
        _say(f"shoal demo: {exc}")
        return 1
    state = Path(tempfile.mkdtemp(prefix="shoal-demo-")) if attached else args.state_dir
    prefix = f"demo{uuid.uuid4().hex[:6]}." if attached else ""
    started: dict[str, int] = {}
    from shoal.devstack.demo import Names

    names = Names.unique(uuid.uuid4().hex[:6]) if attached else Names()
    try:
        info = attached or up(state, say=_say)
        asyncio.run(_prepare(info.kubeconfig, names))
        # On a shared stack the admission webhooks (cluster-wide) stay with the stack's own services.
        names_ = [s for s in SERVICES if not (attached and s == "admission")]
        _say("demo: starting Shoal's services: " + ", ".join(names_))
        env = {**info.env(), "SHOAL_TOPIC_PREFIX": prefix}
        api_port = free_port()
        # every service is launched before any is waited for: if one fails to start, stop them all by name
        started = {f"shoal-{name}": 0 for name in names_}
        started = start_services(state, env, names=names_, ports={"api": api_port})
        _say(f"demo: services ready; logs in {state / 'logs'}")
        _say(f"demo: dashboard at http://127.0.0.1:{api_port}/ (authorisation off: SHOAL_API_AUTH=none, local only) "
             f"(for `shoal explain`/`shoal queues`: export SHOAL_API_URL=http://127.0.0.1:{api_port})")
        ok = asyncio.run(_workload_and_stream(info, prefix, args, names))
    except MissingTools as exc:  # the exact install command, exit 2
        _say(f"shoal demo: {exc}")
        return 2
    except DevStackError as exc:
        _say(f"shoal demo: {exc}")
        ok = False
    except KeyboardInterrupt:
        ok = True
    finally:
        if not args.keep:
            for name in started:
                stop_process(state, name)
            if attached:
                asyncio.run(_remove(info.kubeconfig, names))
            else:
                down(state)
    return 0 if ok else 1


async def _remove(kubeconfig: str, names) -> None:
    from shoal.adapters.kube import Kube, connect_kube
    from shoal.devstack import demo
    from shoal.settings import KubeSettings

    api = await connect_kube(KubeSettings(kubeconfig=kubeconfig))
    try:
        await demo.remove(Kube(api), names)
    finally:
        await api.close()


async def _prepare(kubeconfig: str, names) -> None:
    from kubernetes_asyncio import client, config

    from shoal.devstack.nodes import create_gpu_nodes
    from shoal.devstack.scheduler import install_base

    await install_base(kubeconfig)
    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        made = await create_gpu_nodes(api, names.nodes, gpus=2, gpu_memory_mib=40960, pool=names.pool)
    _say(f"demo: fake GPU nodes {', '.join(made)} (2 GPUs each) in node pool {names.pool!r}")


async def _workload_and_stream(info, prefix: str, args: argparse.Namespace, names) -> bool:
    from shoal.adapters.kube import Kube, connect_kube
    from shoal.cli.events import TOPIC, stream
    from shoal.core.explanation import describe
    from shoal.devstack import demo
    from shoal.settings import KubeSettings

    api = await connect_kube(KubeSettings(kubeconfig=info.kubeconfig))
    kube = Kube(api)
    seen = {"five": False, "three": set()}
    five_ready = asyncio.Event()

    def on_event(event: dict) -> bool:
        subject = event.get("subject", "")
        if not subject.startswith(names.namespace + "/"):
            return False
        print(describe(event), flush=True)
        kind = event.get("type", "").rsplit(".", 1)[-1]
        if kind == "unschedulable" and subject.endswith("/gang-of-5") and \
                GANG_MESSAGE in (event.get("data") or {}).get("message", ""):
            seen["five"] = True
            five_ready.set()
        if kind == "bound" and "/gang-of-3-" in subject:
            seen["three"].add(subject)
        return args.exit_when_done and seen["five"] and len(seen["three"]) == 3

    try:
        await demo.submit(kube, [demo.namespace_doc(names.namespace), demo.queue(names.queue)])
        _say("demo: submitting gang-of-5 (minMember 5, 1 GPU each) — more than the 4 GPUs there are")
        await demo.submit(kube, demo.gang("gang-of-5", 5, names))
        watcher = asyncio.create_task(stream(info.kafka_bootstrap, prefix + TOPIC, follow=True, on_event=on_event))
        try:
            await asyncio.wait_for(five_ready.wait(), timeout=args.timeout)
            _say("demo: submitting gang-of-3 (minMember 3, 1 GPU each)")
            await demo.submit(kube, demo.gang("gang-of-3", 3, names))
            if args.exit_when_done:
                await asyncio.wait_for(watcher, timeout=args.timeout)
            else:
                _say("demo: following decisions; Ctrl-C stops the demo")
                await watcher
        except TimeoutError:
            _say(f"demo: expected outcome not seen within {args.timeout:.0f}s "
                 f"(gang-of-5 reason seen: {seen['five']}, gang-of-3 pods bound: {len(seen['three'])}/3)")
            return False
        finally:
            watcher.cancel()
    finally:
        await api.close()
    _say(f"demo: done at {time.strftime('%H:%M:%S')}: gang-of-5 pending with its reason, gang-of-3 bound whole")
    return True
