"""The README's main command: `shoal demo` schedules its workload through every service and says so."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def test_demo_shows_the_gang_outcomes(stack):
    env = {**os.environ, **stack.env()}
    proc = subprocess.run([sys.executable, "-m", "shoal.cli.main", "demo", "--exit-when-done", "--timeout", "120"],
                          env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert re.search(r"unschedulable shoal-demo-\w+/gang-of-5  PodSchedulingErrors: Resources were found for 4 "
                     r"pods while 5 are required for gang scheduling", proc.stdout), proc.stdout
    bound = [line for line in proc.stdout.splitlines() if re.search(r" bound +shoal-demo-\w+/gang-of-3-", line)]
    assert len(bound) == 3, proc.stdout
    assert "gang-of-3 bound whole" in proc.stderr
    # each verdict once: the pending gang's reason is printed once, not on every planning cycle
    verdicts = [line for line in proc.stdout.splitlines() if re.search(r"unschedulable +shoal-demo-\w+/gang-of-5 ",
                                                                       line)]
    # (a verdict whose message changes, e.g. "found for 4 pods" then "for 1" once the gang-of-3 took its GPUs, is
    # a new verdict: each distinct one appears once)
    messages = [line.split(" ", 1)[1] for line in verdicts]
    assert verdicts and len(messages) == len(set(messages)), proc.stdout
    assert re.search(r"demo: dashboard at http://127\.0\.0\.1:\d+/ ", proc.stderr), proc.stderr
