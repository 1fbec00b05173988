"""`shoal dev up|status|down|build|images|tilt`: the local stack (etcd, kube-apiserver, controller-manager, fake
kubelet, fake GPU nodes, Kafka, Redis) on 127.0.0.1, started from the cached binaries. `up --real-node` adds
real nodes (kubelet + containerd, kube-proxy, CoreDNS, kube-scheduler; needs root) whose pods really run.

Extra processes (Shoal's services, a demo workload) are added to `up` by appending a factory to
`EXTRA_PROCESSES`: it gets the StackInfo and returns a ProcessSpec; `up` starts each one with the stack's
env, a log file and pid tracking, and `down` stops them first.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from shoal.cli import dev_images, dev_tilt

EXTRA_PROCESSES: list[Callable[..., object]] = []


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from shoal.devstack.paths import default_state_dir

    parser = subparsers.add_parser(
        "dev", help="run a local stack: apiserver + fake GPU nodes, Kafka, Redis", description=__doc__
    )
    sub = parser.add_subparsers(dest="dev_command", metavar="ACTION", required=True)
    state_help = f"state directory (default {default_state_dir()})"

    up = sub.add_parser("up", help="build what is missing, start the stack, print its environment")
    up.add_argument("--nodes", type=int, default=2, help="fake GPU nodes to create (default 2)")
    up.add_argument("--gpus-per-node", type=int, default=2, help="GPUs per node (default 2)")
    up.add_argument("--gpu-memory-mib", type=int, default=40960, help="memory per GPU in MiB (default 40960)")
    up.add_argument(
        "--node-pool", default="default", help="value of kai.scheduler/node-pool (default 'default')"
    )
    up.add_argument("--state-dir", type=Path, default=default_state_dir(), help=state_help)
    up.add_argument(
        "--delete-delay", type=float, default=1.0, help="seconds before a graceful pod delete ends"
    )
    up.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C stops everything")
    up.add_argument(
        "--real-node",
        dest="real_nodes",
        action="store_const",
        const=1,
        default=0,
        help="also run a real node (kubelet + containerd) advertising --gpus-per-node fake GPUs; needs root",
    )
    up.add_argument("--real-nodes", type=int, dest="real_nodes", metavar="N", help="run N real nodes")

    build = sub.add_parser("build", help="build or fetch the stack's binaries into the cache (seconds when warm)")
    build.add_argument("--real-node", action="store_true", help="also CoreDNS and the real node's images")
    dev_images.add_parser(sub)
    dev_tilt.add_parser(sub)

    status = sub.add_parser("status", help="show each component, its pid and whether it is alive and ready")
    status.add_argument("--state-dir", type=Path, default=default_state_dir(), help=state_help)

    down = sub.add_parser("down", help="stop every process by pid and remove the state directory")
    down.add_argument("--state-dir", type=Path, default=default_state_dir(), help=state_help)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shoal.devstack.errors import DevStackError, MissingTools

    try:
        if args.dev_command == "up":
            return _up(args)
        if args.dev_command == "build":
            return _build(args.real_node)
        if args.dev_command == "images":
            return dev_images.run(args)
        if args.dev_command == "tilt":
            return dev_tilt.run(args)
        if args.dev_command == "status":
            return _status(args.state_dir)
        return _down(args.state_dir)
    except DevStackError as exc:
        print(f"shoal dev {args.dev_command}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, MissingTools) else 1
    except OSError as exc:
        print(
            f"shoal dev {args.dev_command}: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "),
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # noqa: BLE001 - one line for the user, never a traceback
        print(f"shoal dev {args.dev_command}: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _up(args: argparse.Namespace) -> int:
    from shoal.devstack import DevStackError, down, start_extra, up
    from shoal.devstack.stack import RealNodeOptions

    checks = (("--nodes", args.nodes), ("--gpus-per-node", args.gpus_per_node), ("--real-nodes", args.real_nodes))
    for flag, value in checks:
        if value < 0:
            raise DevStackError(f"{flag} must be >= 0, got {value}")
    real_node = (
        RealNodeOptions(
            count=args.real_nodes, gpus=args.gpus_per_node, gpu_memory_mib=args.gpu_memory_mib, pool=args.node_pool
        )
        if args.real_nodes
        else None
    )
    began = time.monotonic()
    try:
        info = up(
            args.state_dir,
            tie_to_parent=args.foreground,
            delete_delay_s=args.delete_delay,
            real_node=real_node,
            say=_say,
        )
    except KeyboardInterrupt:
        down(args.state_dir)
        return 130
    try:
        names = [f"gpu-{args.node_pool}-{i}" for i in range(1, args.nodes + 1)]
        asyncio.run(_create_nodes(info.kubeconfig, names, args))
        _say(f"devstack: {len(names)} fake GPU node(s) in pool {args.node_pool!r}: {', '.join(names) or '-'}")
        if info.real_nodes:
            _say(f"devstack: real node(s) in pool {args.node_pool!r}: {', '.join(info.real_nodes)}")
        for factory in EXTRA_PROCESSES:
            spec = factory(info)
            start_extra(args.state_dir, spec, tie_to_parent=args.foreground)  # type: ignore[arg-type]
            _say(f"devstack: {spec.name} started")  # type: ignore[attr-defined]
    except BaseException as exc:
        down(args.state_dir)
        if isinstance(exc, DevStackError | KeyboardInterrupt):
            raise
        raise DevStackError(f"stack started but setting it up failed: {type(exc).__name__}: {exc}") from None
    _say(f"devstack: up in {time.monotonic() - began:.1f}s; state in {info.state_dir}")
    env = info.env()
    print("export " + " ".join(f"{k}={v}" for k, v in env.items()))
    sys.stdout.flush()
    if not args.foreground:
        _say("devstack: stop it with `shoal dev down" + _state_flag(args.state_dir) + "`")
        return 0
    return _wait_then_down(args.state_dir)


def _state_flag(state_dir: Path) -> str:
    from shoal.devstack.paths import default_state_dir

    return "" if Path(state_dir).resolve() == default_state_dir().resolve() else f" --state-dir {state_dir}"


def _wait_then_down(state_dir: Path) -> int:
    from shoal.devstack import down, status

    stop = False

    def on_signal(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    _say("devstack: running in the foreground; Ctrl-C stops it")
    try:
        while not stop:
            time.sleep(1)
            dead = [str(r["name"]) for r in status(state_dir) if not r["alive"]]
            if dead:
                _say(f"devstack: {', '.join(dead)} exited; stopping the stack")
                down(state_dir)
                return 1
    except KeyboardInterrupt:
        pass
    down(state_dir)
    _say("devstack: stopped")
    return 0


async def _create_nodes(kubeconfig: str, names: list[str], args: argparse.Namespace) -> None:
    from kubernetes_asyncio import client, config

    from shoal.devstack.nodes import create_gpu_nodes

    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        await create_gpu_nodes(
            api,
            names,
            gpus=args.gpus_per_node,
            gpu_memory_mib=args.gpu_memory_mib,
            pool=args.node_pool,
        )


def _build(real_node: bool) -> int:
    from shoal.devstack import ensure_binaries
    from shoal.devstack.paths import cache_dir

    began = time.monotonic()
    ensure_binaries(_say, real_node=real_node)
    _say(f"devstack: binaries ready in {cache_dir()} ({time.monotonic() - began:.1f}s)")
    return 0


def _status(state_dir: Path) -> int:
    from shoal.devstack import StackInfo, status

    rows = status(state_dir)
    if not rows:
        print(f"no stack in {state_dir}")
        return 1
    print(f"{'COMPONENT':<26}{'PID':>8}  {'ALIVE':<6} READY")
    for row in rows:
        ready = {True: "yes", False: "no", None: "-"}[row["ready"]]  # type: ignore[index]
        print(f"{row['name']!s:<26}{row['pid'] or '-'!s:>8}  {'yes' if row['alive'] else 'no':<6} {ready}")
    try:
        info = StackInfo.load(state_dir)
        print("export " + " ".join(f"{k}={v}" for k, v in info.env().items()))
    except Exception:  # noqa: BLE001 - status still shows the processes
        pass
    return 0 if all(r["alive"] for r in rows) else 1


def _down(state_dir: Path) -> int:
    from shoal.devstack import down

    if not Path(state_dir).exists():
        print(f"no stack in {state_dir}; nothing to stop")
        return 0
    stopped = down(state_dir)
    kept = (
        f"; left {state_dir} in place (it holds no stack)"
        if Path(state_dir).exists()
        else f"; removed {state_dir}"
    )
    print(f"stopped {', '.join(stopped) if stopped else 'nothing'}{kept}")
    return 0
