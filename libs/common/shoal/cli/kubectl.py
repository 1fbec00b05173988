"""`kubectl shoal`: Shoal's verbs as a kubectl plugin (the `kubectl-shoal` console script; kubectl runs any
`kubectl-<name>` on PATH as `kubectl <name>`).

    kubectl shoal explain POD|PODGROUP [-n NAMESPACE]    why it is pending (or was evicted), with the figures
    kubectl shoal queues                                 every queue's deserved / fair share / allocated / limit
    kubectl shoal events [-n NAMESPACE | -A] [--follow]  Shoal's decisions
    kubectl shoal top [queues|nodes]                     GPU use per queue and per node

Like kubectl it uses the current context of the kubeconfig (`--kubeconfig`, else $KUBECONFIG, else
~/.kube/config; `--context` picks another) and that context's namespace unless `-n` is given; `-A` means
every namespace; `-o json|yaml|wide` as kubectl. It asks Shoal's api service (`--api URL` or $SHOAL_API_URL,
else the `shoal-api` Service through the apiserver); when none answers it says so on stderr and reads the
cluster directly (PodGroups, pods, Queues, nodes, events). Errors: one line on stderr, exit 1 (2: bad usage).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

PROG = "kubectl shoal"
DEFAULT_API_SERVICE = "shoal-system/shoal-api"
VERBS = {
    "explain": "why a pod or pod group is pending, or was evicted",
    "queues": "fair share, allocation and limits of every queue",
    "events": "Shoal's scheduling decisions (newest last)",
    "top": "GPU use per queue and per node, like kubectl top",
}


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """kubectl's flags; accepted before and after the verb (values given after it win)."""
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--kubeconfig", default=default(None),
                        help="kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", default=default(None), help="kubeconfig context (default: its current one)")
    parser.add_argument("-n", "--namespace", default=default(None),
                        help="namespace (default: the context's, else 'default')")
    parser.add_argument("-A", "--all-namespaces", action="store_true", default=default(False),
                        help="every namespace")
    parser.add_argument("-o", "--output", choices=("json", "yaml", "wide"), default=default(None),
                        help="json, yaml or wide (default: a table)")
    parser.add_argument("--api", default=default(os.environ.get("SHOAL_API_URL") or None),
                        help="the api service's URL (default $SHOAL_API_URL, else the Service through the apiserver)")
    parser.add_argument("--api-service", default=default(DEFAULT_API_SERVICE),
                        help=f"NAMESPACE/NAME of the api Service (default {DEFAULT_API_SERVICE})")
    parser.add_argument("--request-timeout", type=float, default=default(10.0),
                        help="seconds one request may take (default 10)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    explain = sub.add_parser("explain", help=VERBS["explain"], description=VERBS["explain"] + (
        ": the verdict (PodGroup condition, last decision), the queue's figures, recent events and decisions. "
        "Exit 1 when neither a pod nor a pod group has that name."))
    explain.add_argument("target", metavar="POD|PODGROUP", help="a name (in -n NAMESPACE) or NAMESPACE/NAME")
    sub.add_parser("queues", help=VERBS["queues"], description=VERBS["queues"] + (
        " (GPUs, CPU cores, memory bytes; the limit is the EFFECTIVE one: an omitted limit is the quota). "
        "From the api service, else from the Queues' status (written by Shoal's binder) and their pods."))
    events = sub.add_parser("events", help=VERBS["events"], description=VERBS["events"] + (
        ": the decision stream (scheduled, pipelined, unschedulable with reason, evicted, bound, …) from the api "
        "service, else Shoal's Kubernetes events. -o json / yaml print one document per event."))
    events.add_argument("-f", "--follow", "-w", "--watch", action="store_true", dest="follow",
                        help="keep printing new ones until Ctrl-C")
    events.add_argument("--limit", type=int, default=200, help="at most this many past ones (default 200)")
    top = sub.add_parser("top", help=VERBS["top"], description=VERBS["top"] + (
        ": per queue allocated GPUs against fair share, deserved quota and limit; per node GPUs in use (whole "
        "GPUs and shared ones), free, and the portions handed out on shared GPUs. Node figures are read from "
        "the cluster (nodes and pods)."))
    top.add_argument("what", nargs="?", choices=("queues", "queue", "nodes", "node"), default=None,
                     help="queues or nodes (default both)")
    for verb in (explain, sub.choices["queues"], events, top):
        _common(verb, suppress=True)
    return parser


def kube_context(kubeconfig: str | None, context: str | None) -> tuple[Path | None, str | None, str]:
    """The kubeconfig file kubectl would read (`--kubeconfig`, the first existing file of $KUBECONFIG, then
    ~/.kube/config), the context (given or current) and its namespace ('default' when it names none)."""
    candidates = [kubeconfig] if kubeconfig else [
        *(os.environ.get("KUBECONFIG") or "").split(os.pathsep), str(Path.home() / ".kube" / "config")]
    path = next((Path(c).expanduser() for c in candidates if c and Path(c).expanduser().is_file()), None)
    if kubeconfig and path is None:
        raise ValueError(f"kubeconfig {kubeconfig} does not exist")
    if path is None:
        return None, context, "default"
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read kubeconfig {path}: {exc}") from None
    name = context or doc.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, dict)}
    if context and context not in contexts:
        raise ValueError(f"context {context!r} not found in kubeconfig {path}")
    return path, name, (contexts.get(name) or {}).get("namespace") or "default"


def emit(document: Any, output: str | None, table: Callable[[bool], str]) -> None:
    """Print `document` as kubectl does for -o json / yaml; else the table (wide with -o wide)."""
    if output == "json":
        print(json.dumps(document, indent=2, sort_keys=True))
    elif output == "yaml":
        print(yaml.safe_dump(document, sort_keys=True, default_flow_style=False).rstrip())
    else:
        print(table(output == "wide"))


def warn(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.verb:
        parser.print_help()
        return 2
    if args.verb == "top" and args.what:
        args.what = args.what.rstrip("s") + "s"
    try:
        args.kubeconfig_path, args.context, default_ns = kube_context(args.kubeconfig, args.context)
    except ValueError as exc:
        warn(str(exc))
        return 1
    args.namespace = args.namespace or default_ns
    from shoal.cli.kubectl_verbs import run

    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one clear line, never a traceback
        warn(f"{args.verb}: {type(exc).__name__}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
