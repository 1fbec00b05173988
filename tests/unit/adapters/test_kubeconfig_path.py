"""Which kubeconfig a client uses: the one the settings name (a missing one is an error, never a silent switch
to $KUBECONFIG's cluster), else $KUBECONFIG's first existing file, else ~/.kube/config, else in-cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.adapters.kube import kubeconfig_path
from shoal.errors import ConfigError
from shoal.settings import KubeSettings


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    home, other = tmp_path / "home", tmp_path / "other"
    (home / ".kube").mkdir(parents=True)
    other.write_text("apiVersion: v1\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{other}")
    return {"home": home / ".kube" / "config", "other": other, "named": tmp_path / "named"}


def test_a_named_kubeconfig_that_is_missing_is_an_error_even_with_others_around(files: dict[str, Path]) -> None:
    files["home"].write_text("apiVersion: v1\n")
    with pytest.raises(ConfigError) as info:
        kubeconfig_path(KubeSettings(kubeconfig=str(files["named"])))
    assert list(info.value.problems) == [f"SHOAL_KUBE_KUBECONFIG (or SHOAL_KUBECONFIG): {files['named']} does not exist"]


def test_the_named_one_then_kubeconfig_then_home_then_in_cluster(files: dict[str, Path],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    files["named"].write_text("apiVersion: v1\n")
    assert kubeconfig_path(KubeSettings(kubeconfig=str(files["named"]))) == files["named"]
    assert kubeconfig_path(KubeSettings()) == files["other"]  # the first of $KUBECONFIG's that exists
    monkeypatch.delenv("KUBECONFIG")
    assert kubeconfig_path(KubeSettings()) is None  # no file at all: in-cluster
    files["home"].write_text("apiVersion: v1\n")
    assert kubeconfig_path(KubeSettings()) == files["home"]
    assert kubeconfig_path(KubeSettings(in_cluster=True, kubeconfig=str(files["named"]))) is None
