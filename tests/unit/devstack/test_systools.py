"""Missing host tools are installed from Debian when allowed (a fresh machine's first `shoal demo`), and named
with their fix otherwise (shoal.devstack.systools)."""

from __future__ import annotations

import subprocess

import pytest

from shoal.devstack import systools
from shoal.devstack.errors import DevStackError

TOOLS = {"redis-server": "apt-get install -y --no-install-recommends redis-server",
         "java": "apt-get install -y --no-install-recommends default-jre-headless",
         "go": "install Go >= 1.24 (https://go.dev/dl) and put it on PATH"}


def fake_path(monkeypatch: pytest.MonkeyPatch, present: set[str]) -> None:
    monkeypatch.setattr(systools.shutil, "which", lambda tool: f"/usr/bin/{tool}" if tool in present else None)


def test_apt_packages_are_read_from_the_fix() -> None:
    assert systools.apt_packages("apt-get install -y --no-install-recommends gcc libc6-dev") == ["gcc", "libc6-dev"]
    assert systools.apt_packages(TOOLS["go"]) == []


def test_missing_apt_tools_are_installed_in_one_go_when_root(monkeypatch: pytest.MonkeyPatch) -> None:
    present = {"apt-get", "go"}
    fake_path(monkeypatch, present)
    monkeypatch.setattr(systools.os, "geteuid", lambda: 0)
    monkeypatch.delenv("SHOAL_APT", raising=False)
    ran: list[list[str]] = []

    def runner(argv: list[str]) -> subprocess.CompletedProcess:
        ran.append(argv)
        if argv[1] == "install":
            present.update({"redis-server", "java"})
        return subprocess.CompletedProcess(argv, 0, "", "")

    said: list[str] = []
    systools.require(TOOLS, said.append, runner=runner)
    assert ran == [["apt-get", "update", "-qq"],
                   ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "default-jre-headless",
                    "redis-server"]]
    assert said and "default-jre-headless redis-server" in said[0] and "SHOAL_APT=0" in said[0]


@pytest.mark.parametrize("why", ["not root", "SHOAL_APT=0", "no apt-get"])
def test_without_leave_to_install_every_missing_tool_is_named_with_its_fix(monkeypatch: pytest.MonkeyPatch,
                                                                        why: str) -> None:
    fake_path(monkeypatch, set() if why == "no apt-get" else {"apt-get"})
    monkeypatch.setattr(systools.os, "geteuid", lambda: 1000 if why == "not root" else 0)
    monkeypatch.setenv("SHOAL_APT", "0" if why == "SHOAL_APT=0" else "1")

    def runner(argv: list[str]) -> subprocess.CompletedProcess:
        raise AssertionError(f"ran {argv}")

    with pytest.raises(DevStackError) as failed:
        systools.require(TOOLS, lambda _: None, runner=runner)
    message = str(failed.value)
    assert isinstance(failed.value, systools.MissingTools)
    reason = {"not root": "not root", "SHOAL_APT=0": "SHOAL_APT=0", "no apt-get": "no apt-get on PATH"}[why]
    assert (f"redis-server, java not found on PATH ({reason}): run `apt-get update && apt-get install -y "
            "--no-install-recommends default-jre-headless redis-server` as root") in message
    assert "go not found on PATH: install Go" in message and "\n" not in message


def test_a_failed_install_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_path(monkeypatch, {"apt-get"})
    monkeypatch.setattr(systools.os, "geteuid", lambda: 0)
    monkeypatch.delenv("SHOAL_APT", raising=False)

    def runner(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(argv, 100, "", "E: Unable to locate package redis-server\n")

    with pytest.raises(DevStackError, match=r"apt-get update failed \(exit 100\): E: Unable to locate package"):
        systools.require({"redis-server": TOOLS["redis-server"]}, lambda _: None, runner=runner)
