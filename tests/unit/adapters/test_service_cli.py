"""Every console script in pyproject.toml answers `--help` from its settings declarations, opening nothing;
an unknown argument is one line and exit 2; invalid settings are listed and exit 2."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from shoal.adapters.startup import EXIT_STATUSES, Service
from shoal.settings import default_text, type_text, variables

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = {name: target for name, target in
           tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"].items()
           if name.startswith("shoal-")}  # the services; `shoal` and `kubectl-shoal` are the commands


def script_module(name: str) -> ModuleType:
    module_name, _, function = SCRIPTS[name].partition(":")
    assert function == "main", SCRIPTS[name]
    return importlib.import_module(module_name)


def service_of(name: str) -> Service:
    service = script_module(name).SERVICE
    assert service.prog == name
    return service


def test_every_service_has_a_console_script() -> None:
    services = {p.parent.name for p in (REPO / "services").glob("*/__main__.py")}
    assert {f"shoal-{s}" for s in services} == set(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_wiring_is_where_the_service_says(name: str) -> None:
    assert callable(pkgutil.resolve_name(service_of(name).build))


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_setting_says_what_it_is(name: str) -> None:
    undescribed = [v.name for v in variables(service_of(name).settings) if not v.description]
    assert not undescribed, f"add doc(...) to these settings' declarations: {undescribed}"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_help_lists_every_setting_with_type_and_default(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    service = service_of(name)
    script_module(name).main(["--help"])
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"usage: {name} [-h | --help]"
    assert textwrap.dedent(service.about or "").strip().splitlines()[0] in out
    for var in variables(service.settings):
        entry = f"  {var.name}" + (f" (or {var.alias})" if var.alias else "")
        line = next((i for i, text in enumerate(lines) if text.startswith(entry + "  ")), None)
        assert line is not None, f"{var.name} missing from {name} --help"
        assert lines[line].endswith(f"{type_text(var.type)}, default {default_text(var.default)}")
        assert lines[line + 1].strip() == var.description
    for code, text in EXIT_STATUSES:
        assert f"{code:<3}  {text}" in out
    for dependency in service.needs:
        assert dependency.name in out


def test_help_shows_bounds_choices_lists_and_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    script_module("shoal-podgrouper").main(["-h"])
    out = capsys.readouterr().out
    assert "  SHOAL_WORKERS  int (>= 1, <= 64), default 16\n      pods grouped concurrently\n" in out
    assert "  SHOAL_SCHEDULER_NAMES (or SHOAL_SCHEDULER_NAME)  list of str, default shoal-scheduler\n" in out
    assert "  SHOAL_KAFKA_SECURITY_PROTOCOL  PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL, default PLAINTEXT\n" in out
    assert "  SHOAL_KUBE_KUBECONFIG (or SHOAL_KUBECONFIG)  str, default unset\n" in out
    assert "Reaches at start: Kubernetes API (within SHOAL_START_TIMEOUT_S)." in out


def test_an_unknown_argument_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        script_module("shoal-planner").main(["--shard", "a"])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert err.splitlines() == ["shoal-planner: unknown argument '--shard' (it takes only --help; settings are "
                                "SHOAL_* environment variables)"]


def test_invalid_settings_are_listed_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SHOAL_START_TIMEOUT_S", "-1")
    monkeypatch.setenv("SHOAL_WORKERS", "0")
    with pytest.raises(SystemExit) as info:
        script_module("shoal-podgrouper").main([])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith("invalid settings:\n") and "SHOAL_START_TIMEOUT_S" in err and "SHOAL_WORKERS" in err


# Runs in a fresh interpreter: the audit hook is installed before any service module is imported, so import-time
# side effects count too. Any connection, bind, name lookup or datagram ends the process with status 99.
NO_NETWORK = """
import os, sys
def hook(event, args):
    if event in ("socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto",
                 "socket.sendmsg"):
        os.write(2, f"network use during --help: {event} {args!r}\\n".encode())
        os._exit(99)
sys.addaudithook(hook)
import importlib
for target in sys.argv[1:]:
    module, _, function = target.partition(":")
    getattr(importlib.import_module(module), function)(["--help"])
"""


def test_help_of_every_script_opens_no_socket(tmp_path: Path) -> None:
    env = {"PATH": "", "HOME": str(tmp_path), "SHOAL_KAFKA_BOOTSTRAP": "127.0.0.1:1",
           "SHOAL_REDIS_URL": "redis://127.0.0.1:1/0", "SHOAL_KUBECONFIG": str(tmp_path / "missing")}
    result = subprocess.run([sys.executable, "-c", NO_NETWORK, *SCRIPTS.values()], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.count("usage: shoal-") == len(SCRIPTS)


def test_a_started_service_keeps_what_it_imported_out_of_later_collections() -> None:
    """`quiet_collector` (run once the app is built): the objects made so far are frozen and young collections
    run every YOUNG_THRESHOLD allocations. In a child process: this one's collector stays as pytest set it."""
    code = textwrap.dedent("""
        import gc
        from shoal.adapters.startup import YOUNG_THRESHOLD, quiet_collector
        assert gc.get_freeze_count() == 0
        quiet_collector()
        assert gc.get_freeze_count() > 1000, gc.get_freeze_count()
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD > 700
        assert gc.isenabled()
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# A service of its own in a fresh interpreter: its app says which loop it started on, then stops itself (SIGTERM).
LOOP_PROBE = """
import asyncio, os, signal
from aiohttp import web
from shoal.adapters.startup import Service
from shoal.settings import ServiceSettings

def build(settings):
    app = web.Application()

    async def say(app):
        print(type(asyncio.get_running_loop()).__module__, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    app.on_startup.append(say)
    return app

Service("probe", ServiceSettings, "__main__:build").main([])
"""


@pytest.mark.parametrize(("setting", "module"), [(None, "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_a_service_runs_on_the_event_loop_its_setting_names(tmp_path: Path, setting: str | None,
                                                            module: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHOAL_HTTP_PORT": "0", "SHOAL_LOG_LEVEL": "ERROR",
           **({"SHOAL_EVENT_LOOP": setting} if setting else {})}
    done = subprocess.run([sys.executable, "-c", LOOP_PROBE], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split(".")[0] == module


def test_an_unknown_event_loop_is_an_invalid_setting(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SHOAL_EVENT_LOOP", "trio")
    with pytest.raises(SystemExit) as info:
        script_module("shoal-planner").main([])
    assert info.value.code == 2
    assert "SHOAL_EVENT_LOOP" in capsys.readouterr().err
