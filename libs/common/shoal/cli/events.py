"""`shoal events [--follow]`: print Shoal's public decision stream (`shoal.decisions.v1`).

One line per decision: time, kind, subject and what was decided (node, reason, evictor). `--output json`
prints the CloudEvents JSON as it is on the topic, one per line, for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable

from shoal.core.explanation import describe

TOPIC = "shoal.decisions.v1"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("events", help="print the decision stream (shoal.decisions.v1)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new decisions until Ctrl-C")
    parser.add_argument("--output", "-o", choices=("text", "json"), default="text")
    parser.add_argument("--bootstrap", default=os.environ.get("SHOAL_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
                        help="Kafka bootstrap servers (default $SHOAL_KAFKA_BOOTSTRAP)")
    parser.add_argument("--topic-prefix", default=os.environ.get("SHOAL_TOPIC_PREFIX", ""),
                        help="prefix of Shoal's topic names (default $SHOAL_TOPIC_PREFIX)")
    parser.add_argument("--subject", default="", help="only decisions about this ns/name (pod or podgroup)")
    parser.set_defaults(func=run)


async def stream(bootstrap: str, topic: str, *, follow: bool, on_event: Callable[[dict], bool | None],
                 idle_s: float = 2.0) -> None:
    """Read the topic from the beginning; call `on_event` for each event (True from it stops the stream)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        quiet = 0.0
        while True:
            batch = await consumer.getmany(timeout_ms=500)
            if not batch:
                quiet += 0.5
                if not follow and quiet >= idle_s:
                    return
                continue
            quiet = 0.0
            for records in batch.values():
                for record in records:
                    try:
                        event = json.loads(record.value)
                    except ValueError:
                        continue
                    if on_event(event):
                        return
    finally:
        await consumer.stop()


def run(args: argparse.Namespace) -> int:
    def show(event: dict) -> None:
        if args.subject and event.get("subject") != args.subject:
            return
        line = json.dumps(event, sort_keys=True) if args.output == "json" else describe(event)
        print(line, flush=True)

    try:
        asyncio.run(stream(args.bootstrap, args.topic_prefix + TOPIC, follow=args.follow, on_event=show))
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # noqa: BLE001 - one clear line, never a traceback
        print(f"shoal events: cannot read {args.topic_prefix + TOPIC} from {args.bootstrap}: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
