"""`shoal bench soak --minutes N`: churn with faults on the running stack, then the checks (devstack/soak.py).

Needs a stack of its own (`shoal dev up --nodes 0 --state-dir DIR`, then export what it prints, including
SHOAL_DEV_STATE_DIR: the faults restart that stack's Kafka, Redis and apiserver by pid). Prints a table (or JSON
with --json) and exits 1 naming every failed check, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

FAULTS = ("kill", "kafka", "redis", "apiserver")  # shoal.devstack.soak_faults.FAULTS (not imported: CLI start-up)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=10.0, help="soak: minutes of churn before the settle")
    parser.add_argument("--fault-every", type=float, default=120.0,
                        help="soak: seconds between faults (0: none), kinds in rotation")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"soak: which faults, comma-separated, from {','.join(FAULTS)}")
    parser.add_argument("--jobs-per-s", type=float, default=0.4, help="soak: mean job arrival rate")
    parser.add_argument("--sample-every", type=float, default=15.0, help="soak: seconds between samples")


def run_soak(args: argparse.Namespace) -> int:
    from shoal.devstack import DevStackError, StackInfo
    from shoal.devstack.soak import Options, run, table
    from shoal.errors import ShoalError

    kinds = tuple(f.strip() for f in str(args.faults).split(",") if f.strip())
    problems = [f"--faults: unknown {f!r} (choose from {', '.join(FAULTS)})" for f in kinds if f not in FAULTS]
    problems += ["--minutes: must be above 0"] if args.minutes <= 0 else []
    problems += ["--jobs-per-s: must be above 0"] if args.jobs_per_s <= 0 else []
    problems += ["--sample-every: must be at least 1"] if args.sample_every < 1 else []
    problems += ["--fault-every: must be 0 (none) or at least 30"] if 0 < args.fault_every < 30 else []
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    try:
        info = StackInfo.from_env()
    except DevStackError as exc:
        print(f"shoal bench soak: {exc}", file=sys.stderr)
        return 1
    if info is None or not info.state_dir:
        print("shoal bench soak: no stack of its own: run `shoal dev up --nodes 0 --state-dir DIR` and export the "
              "SHOAL_* variables it prints (SHOAL_DEV_STATE_DIR too: the faults restart its components)",
              file=sys.stderr)
        return 1
    opts = Options(minutes=args.minutes, seed=args.seed, nodes=args.nodes or 6, fault_every_s=args.fault_every,
                   faults=kinds, jobs_per_s=args.jobs_per_s, sample_s=args.sample_every)
    import logging

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the samplers' clients during a Kafka outage: expected
    try:
        result = asyncio.run(run(info, opts, progress=lambda line: print(line, file=sys.stderr, flush=True)))
    except (DevStackError, ShoalError, OSError) as exc:
        print(f"shoal bench soak: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else table(result), end="\n" if args.json else "")
    if not result["passed"]:
        print(f"shoal bench soak: FAILED checks: {', '.join(result['failed'])}", file=sys.stderr)
    return 0 if result["passed"] else 1
