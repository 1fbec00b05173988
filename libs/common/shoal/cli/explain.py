"""`shoal explain POD|PODGROUP [-n NAMESPACE]`: why a pod or pod group is pending, or why it was evicted.

Asks the api service (`--api`, default $SHOAL_API_URL or http://127.0.0.1:8080) with the caller's bearer token
(`--token`, default $SHOAL_API_TOKEN, else the kubeconfig's: token, tokenFile or exec plugin; docs/api.md, Access);
when none answers, reads the
apiserver (kubeconfig from $SHOAL_KUBECONFIG / $KUBECONFIG), Redis ($SHOAL_REDIS_URL) and, when
$SHOAL_KAFKA_BOOTSTRAP is set, the decision topic (from the beginning) directly. The first line is the verdict, e.g.

    team-a/train: pending: PodSchedulingErrors: Resources were found for 4 pods while 5 are required for gang …
    queue q: fair share 4 GPUs, allocated 4, limit 4 (quota; limit omitted), deserved 4, requested 9

followed by the recent events and decisions. `--output json` prints the whole answer (the api's JSON).
Exit status: 0 explained, 1 not found or an error (one line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

DEFAULT_API = "http://127.0.0.1:8080"


class Unreachable(Exception):
    """No api service answered at the URL."""


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api", default=os.environ.get("SHOAL_API_URL") or DEFAULT_API,
                        help="the api service's URL (default $SHOAL_API_URL or %(default)s)")
    parser.add_argument("--output", "-o", choices=("text", "json"), default="text")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for an answer")
    parser.add_argument("--token", default=os.environ.get("SHOAL_API_TOKEN") or None,
                        help="bearer token for the api service (default $SHOAL_API_TOKEN, else the kubeconfig's)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("explain", help="why is a pod or pod group pending (or evicted)?",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", metavar="POD|PODGROUP", help="a pod or pod group name (or NAMESPACE/NAME)")
    parser.add_argument("--namespace", "-n", default="default", help="namespace (default %(default)s)")
    add_common(parser)
    parser.set_defaults(func=run)


def kubeconfig_token() -> str | None:
    """The bearer token of the kubeconfig ($SHOAL_KUBECONFIG, $KUBECONFIG, ~/.kube/config): its token, tokenFile
    or exec plugin's; None when there is none (client certificates cannot be passed on to the api service)."""
    from shoal.adapters import kube as k
    from shoal.settings import KubeSettings

    async def read() -> str | None:
        api = await k.connect_kube(KubeSettings(kubeconfig=os.environ.get("SHOAL_KUBECONFIG") or None))
        try:
            return await k.bearer_token(api)
        finally:
            await api.close()

    try:
        return asyncio.run(read())
    except Exception:  # noqa: BLE001 - no usable kubeconfig: ask without a token (the api says 401 if it needs one)
        return None


def api_get(base: str, path: str, timeout: float, token: str | None = None) -> tuple[int, Any]:
    """GET a JSON document from the api service: (status, body). Raises Unreachable when nothing answers."""
    url = base.rstrip("/") + path
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        request = urllib.request.Request(url, headers=headers)  # noqa: S310 - operator-given URL
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - operator-given URL
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"null")
        except ValueError:
            return exc.code, {"error": f"HTTP {exc.code} {exc.reason}"}
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        raise Unreachable(f"{url}: {getattr(exc, 'reason', exc)}") from None
    except ValueError as exc:
        raise Unreachable(f"{url}: not an api service answer ({exc})") from None


async def with_redis(work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run `work(redis)` on $SHOAL_REDIS_URL; `work(None)` when Redis does not answer within 2 s."""
    from shoal.adapters.redis_client import connect_redis
    from shoal.settings import RedisSettings

    redis = connect_redis(RedisSettings(url=os.environ.get("SHOAL_REDIS_URL") or RedisSettings().url))
    try:
        try:
            async with asyncio.timeout(2):
                await redis.ping()
        except (Exception, TimeoutError):  # noqa: BLE001 - any failure means "no Redis"
            return await work(None)
        return await work(redis)
    finally:
        await redis.aclose()


async def decision_history(timeout_s: float = 10.0) -> list[dict]:
    """The decisions on the topic ($SHOAL_KAFKA_BOOTSTRAP, $SHOAL_TOPIC_PREFIX), read from the beginning;
    none when Kafka is not configured or not reachable (the explanation is then made without them)."""
    from shoal.cli.events import TOPIC, stream

    bootstrap = os.environ.get("SHOAL_KAFKA_BOOTSTRAP")
    if not bootstrap:
        return []
    events: list[dict] = []
    try:
        await asyncio.wait_for(stream(bootstrap, os.environ.get("SHOAL_TOPIC_PREFIX", "") + TOPIC, follow=False,
                                      on_event=events.append, idle_s=1.0), timeout_s)
    except (Exception, TimeoutError):  # noqa: BLE001 - decisions are a bonus here, not a requirement
        pass
    return events


async def direct(namespace: str, name: str) -> dict:
    """The explanation read straight from the apiserver and Redis (no api service)."""
    from shoal.adapters import kube as k
    from shoal.adapters import redis_keys
    from shoal.adapters.explain import explain
    from shoal.adapters.latest_value import LatestValue
    from shoal.messages.plan import FairShareComputed
    from shoal.settings import KubeSettings

    api = await k.connect_kube(KubeSettings(kubeconfig=os.environ.get("SHOAL_KUBECONFIG") or None))
    try:
        kube = k.Kube(api, request_timeout_s=10)
        response = await kube.open("GET", "/version", timeout=5)  # fail fast when the apiserver is down
        response.release()

        history = await decision_history()

        def decisions_for(subjects: Sequence[str]) -> list[dict]:
            return [e for e in history
                    if e.get("subject") in subjects or (e.get("data") or {}).get("podGroup") in subjects]

        async def work(redis: Any) -> dict:
            fair = LatestValue(redis, redis_keys.fair_share, FairShareComputed) if redis is not None else None
            answer = await explain(kube, fair, namespace, name, decisions_for=decisions_for)
            if redis is None and answer["queue"]:
                answer["queueLine"] = f"queue {answer['queue']}: fair-share figures unavailable (Redis not reachable)"
            return answer

        return await with_redis(work)
    finally:
        await api.close()


def split_target(target: str, namespace: str) -> tuple[str, str]:
    if "/" in target:
        ns, _, name = target.partition("/")
        return ns, name
    return namespace, target


def fail(command: str, message: str) -> int:
    print(f"shoal {command}: {message}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    from shoal.core.explanation import render

    namespace, name = split_target(args.target, args.namespace)
    if not namespace or not name or "/" in name:
        return fail("explain", f"cannot read {args.target!r}: give NAME with -n NAMESPACE, or NAMESPACE/NAME")
    path = f"/v1/explain/{urllib.parse.quote(namespace)}/{urllib.parse.quote(name)}"
    try:
        status, answer = api_get(args.api, path, args.timeout, args.token or kubeconfig_token())
    except Unreachable as exc:
        print(f"shoal explain: no api service ({exc}); reading the apiserver and Redis directly", file=sys.stderr)
        try:
            answer = asyncio.run(asyncio.wait_for(direct(namespace, name), args.timeout + 30))
        except Exception as exc2:  # noqa: BLE001 - one clear line, never a traceback
            return fail("explain", f"cannot reach the api service nor the cluster: {type(exc2).__name__}: {exc2}")
        status = 200 if answer.get("found") else 404
    if not isinstance(answer, dict) or ("verdict" not in answer):
        error = answer.get("error") if isinstance(answer, dict) else answer
        return fail("explain", f"the api service answered {status}: {error}")
    print(json.dumps(answer, indent=2, sort_keys=True) if args.output == "json" else render(answer))
    return 0 if status == 200 else 1
