"""`shoal dev tilt [TILT ARGS]`: the repository's Tiltfile against a `shoal dev up --real-node` stack, where no
Docker engine and no public registry exist: the stack's registry, podman's Docker API and a dev overlay with
stand-ins for the third-party images are made ready first (shoal.devstack.tilt), then `tilt TILT ARGS` runs
(default `up`; UI and API on 127.0.0.1, port in TILT_PORT), and the build containers Tilt leaves are removed
when it ends. `--print-env` prints the environment instead, to run Tilt yourself. See docs/deploy.md (Tilt)."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    from shoal.devstack.paths import default_state_dir

    tilt = sub.add_parser(
        "tilt", help="run Tilt (default `tilt up`) against a --real-node stack", description=__doc__
    )
    tilt.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help=f"state directory (default {default_state_dir()})",
    )
    tilt.add_argument("--print-env", action="store_true", help="print `export` lines for Tilt and exit")
    tilt.add_argument(
        "tilt_args", nargs=argparse.REMAINDER, help="arguments for tilt, e.g. `ci` (default: up)"
    )


def run(args: argparse.Namespace) -> int:
    from shoal.devstack.scheduler import REPO
    from shoal.devstack.tilt import build_containers, prepare, remove_build_containers, tilt_binary

    env = prepare(args.state_dir)
    if args.print_env:
        kubectl_dir = env.pop("PATH").split(os.pathsep, 1)[0]
        for name, value in env.items():
            print(f"export {name}={shlex.quote(value)}")
        print(f'export PATH={shlex.quote(kubectl_dir)}:"$PATH"')
        return 0
    argv = [a for a in args.tilt_args if a != "--"] or ["up"]
    print(f"shoal dev tilt: tilt {' '.join(argv)} (API on 127.0.0.1:{env['TILT_PORT']})", file=sys.stderr)
    builds = argv[0] in ("ci", "up")
    before = build_containers() if builds else set()
    try:
        return subprocess.run([str(tilt_binary()), *argv], cwd=REPO, env={**os.environ, **env}).returncode
    except KeyboardInterrupt:  # Ctrl-C ends `tilt up`
        return 130
    finally:
        if builds:
            remove_build_containers(before)
