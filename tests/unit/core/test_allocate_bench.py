"""`shoal bench core`: the generated clusters are deterministic and the command validates its sizes."""

from __future__ import annotations

import argparse

import msgspec

from shoal.cli import bench
from shoal.core.cycle import run_cycle
from shoal.core.plan import Bind


def test_generated_cluster_is_deterministic_and_schedulable():
    a = bench.generate(100, 2000, seed=3)
    b = bench.generate(100, 2000, seed=3)
    assert msgspec.json.encode(a) == msgspec.json.encode(b)
    assert len(a.nodes) == 100 and 1800 <= len(a.pods) <= 2400
    assert sum(1 for p in a.pods if p.node_name is None) >= 300
    assert {p.fraction is not None for p in a.pods} == {True, False}
    plan = run_cycle(a)
    assert plan.of(Bind)


def test_bench_rejects_unknown_sizes(capsys):
    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers())
    args = parser.parse_args(["bench", "core", "--sizes", "123"])
    assert args.func(args) == 2
    assert "unknown size" in capsys.readouterr().err
