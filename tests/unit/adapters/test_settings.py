"""Settings come from SHOAL_* variables, nested by prefix; all invalid values are reported together."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import pytest
from msgspec import Meta

from shoal.errors import ConfigError
from shoal.settings import ServiceSettings, load_settings, redacted


class PlannerSettings(ServiceSettings, frozen=True, kw_only=True):
    cycle_interval_s: Annotated[float, Meta(gt=0)] = 1.0
    actions: tuple[str, ...] = ("allocate", "reclaim")


def test_defaults_without_environment() -> None:
    s = load_settings(PlannerSettings, env={})
    assert s.kafka.bootstrap == "127.0.0.1:9092"
    assert s.http.host == "127.0.0.1" and s.http.port == 8080
    assert s.log_level == "INFO" and s.shard == "default"
    assert s.actions == ("allocate", "reclaim")


def test_values_are_read_and_converted() -> None:
    env = {
        "SHOAL_SHARD": "pool-a",
        "SHOAL_LOG_LEVEL": "DEBUG",
        "SHOAL_HTTP_PORT": "9100",
        "SHOAL_KAFKA_BOOTSTRAP": "k1:9093,k2:9093",
        "SHOAL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "SHOAL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "SHOAL_KAFKA_SASL_USERNAME": "shoal",
        "SHOAL_KAFKA_SASL_PASSWORD": "s3cret",
        "SHOAL_REDIS_URL": "rediss://redis:6380/0",
        "SHOAL_KUBE_IN_CLUSTER": "true",
        "SHOAL_CYCLE_INTERVAL_S": "0.5",
        "SHOAL_ACTIONS": "allocate, preempt",
        "SHOAL_KUBE_KUBECONFIG": "",  # empty means unset
    }
    s = load_settings(PlannerSettings, env=env)
    assert (s.shard, s.log_level, s.http.port) == ("pool-a", "DEBUG", 9100)
    assert s.kafka.security_protocol == "SASL_SSL" and s.kafka.sasl_password == "s3cret"
    assert s.redis.url.startswith("rediss://")
    assert s.kube.in_cluster is True and s.kube.kubeconfig is None
    assert s.cycle_interval_s == 0.5 and s.actions == ("allocate", "preempt")
    assert redacted(s)["kafka"]["sasl_password"] == "***"


def test_kubeconfig_alias_used_by_the_dev_stack() -> None:
    assert load_settings(ServiceSettings, env={"SHOAL_KUBECONFIG": "/k"}).kube.kubeconfig == "/k"
    env = {"SHOAL_KUBECONFIG": "/k", "SHOAL_KUBE_KUBECONFIG": "/own"}
    assert load_settings(ServiceSettings, env=env).kube.kubeconfig == "/own"


def test_every_invalid_value_is_listed_together() -> None:
    env = {
        "SHOAL_HTTP_PORT": "70000",
        "SHOAL_LOG_LEVEL": "LOUD",
        "SHOAL_CYCLE_INTERVAL_S": "-1",
        "SHOAL_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "SHOAL_REDIS_URL": "http://nope",
        "SHOAL_KUBE_IN_CLUSTER": "maybe",
    }
    with pytest.raises(ConfigError) as info:
        load_settings(PlannerSettings, env=env)
    text = "\n".join(info.value.problems)
    for var in ("SHOAL_HTTP_PORT", "SHOAL_LOG_LEVEL", "SHOAL_CYCLE_INTERVAL_S", "SHOAL_KAFKA_SASL_MECHANISM",
                "SHOAL_KAFKA_SASL_USERNAME", "SHOAL_REDIS_URL", "SHOAL_KUBE_IN_CLUSTER"):
        assert var in text, var
    assert len(info.value.problems) >= 7


def test_the_idle_fetch_wait_stays_under_the_request_timeout() -> None:
    assert load_settings(ServiceSettings, env={}).kafka.idle_fetch_wait_ms == 500
    # one at or under the short wait is allowed (every fetch keeps the short wait), e.g. a short wait raised alone
    raised = load_settings(ServiceSettings, env={"SHOAL_KAFKA_FETCH_MAX_WAIT_MS": "800"}).kafka
    assert (raised.fetch_max_wait_ms, raised.idle_fetch_wait_ms) == (800, 500)
    with pytest.raises(ConfigError) as info:
        load_settings(ServiceSettings, env={"SHOAL_KAFKA_IDLE_FETCH_WAIT_MS": "30000"})  # request_timeout_ms
    assert ["SHOAL_KAFKA_IDLE_FETCH_WAIT_MS" in problem for problem in info.value.problems] == [True]


def test_invalid_settings_exit_with_status_2() -> None:
    code = (
        "from shoal.settings import ServiceSettings, settings_or_exit\n"
        "settings_or_exit(ServiceSettings)\n"
    )
    env = {"SHOAL_HTTP_PORT": "x", "SHOAL_LOG_LEVEL": "LOUD", "PATH": ""}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "SHOAL_HTTP_PORT" in result.stderr and "SHOAL_LOG_LEVEL" in result.stderr
    assert result.stdout == ""
