"""`shoal queues [--shard POOL]`: every queue's fair-share figures, per shard (node pool).

Per queue: deserved quota, fair share, allocated, EFFECTIVE limit (an omitted limit is the quota; -1 shows as
unlimited) and requested, in GPUs (and CPU cores), as the fairshare service last published them. Asks the api
service (`--api`, default $SHOAL_API_URL or http://127.0.0.1:8080); when none answers, reads Redis
($SHOAL_REDIS_URL) directly. `--output json` prints `{"shards": {<shard>: {"revision", "producedAt",
"queues": {<queue>: {"gpu"|"cpu"|"memory": {"deserved", "fairShare", "allocated", "limit", "request",
"allocatedNonPreemptible"}}}}}}` (GPUs, CPU cores, memory bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.parse
from typing import Any

from shoal.cli.explain import Unreachable, add_common, api_get, fail, kubeconfig_token, with_redis


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("queues", help="fair share, allocation and limits of every queue",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shard", default="", help="only this shard (node pool)")
    add_common(parser)
    parser.set_defaults(func=run)


async def direct(shard: str) -> dict:
    from shoal.adapters.explain import all_queues

    async def work(redis: Any) -> dict:
        if redis is None:
            raise ConnectionError("Redis does not answer")
        return {"shards": await all_queues(redis, shard=shard or None)}

    return await with_redis(work)


def run(args: argparse.Namespace) -> int:
    from shoal.core.explanation import render_queues

    path = "/v1/queues" + (f"?shard={urllib.parse.quote(args.shard)}" if args.shard else "")
    try:
        status, body = api_get(args.api, path, args.timeout, args.token or kubeconfig_token())
    except Unreachable as exc:
        print(f"shoal queues: no api service ({exc}); reading Redis directly", file=sys.stderr)
        try:
            body, status = asyncio.run(asyncio.wait_for(direct(args.shard), args.timeout + 15)), 200
        except Exception as exc2:  # noqa: BLE001 - one clear line, never a traceback
            return fail("queues", f"cannot reach the api service nor Redis: {type(exc2).__name__}: {exc2}")
    if status != 200 or not isinstance(body, dict) or "shards" not in body:
        error = body.get("error") if isinstance(body, dict) else body
        return fail("queues", f"the api service answered {status}: {error}")
    print(json.dumps(body, indent=2, sort_keys=True) if args.output == "json" else render_queues(body["shards"]))
    return 0
