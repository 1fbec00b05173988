"""Typed settings from `SHOAL_*` environment variables, one settings object per service.

A field `x` of the settings struct is read from `SHOAL_X`; a nested struct field `kafka` gives its own fields
the prefix `SHOAL_KAFKA_` (so `SHOAL_KAFKA_BOOTSTRAP`, `SHOAL_REDIS_URL`, `SHOAL_HTTP_PORT`, ...). Empty or
unset variables keep the default. Comma-separated values fill tuple fields. Every invalid value is reported
together in one `ConfigError`; `settings_or_exit` prints them and exits with status 2.

Usage (in `services/<name>/__main__.py`)::

    class PlannerSettings(ServiceSettings, frozen=True, kw_only=True):
        cycle_interval_s: Annotated[float, Meta(gt=0)] = 1.0      # SHOAL_CYCLE_INTERVAL_S

    settings = settings_or_exit(PlannerSettings)
    configure_logging("planner", settings.log_level)
"""

from __future__ import annotations

import os
import sys
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import msgspec
from msgspec import Meta

from shoal.errors import ConfigError

PREFIX = "SHOAL_"

Port = Annotated[int, Meta(ge=0, le=65535)]
PositiveInt = Annotated[int, Meta(gt=0)]
PositiveFloat = Annotated[float, Meta(gt=0)]


class Section(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every settings struct; override `problems` for checks that involve several fields.
    `env_aliases` maps a field to another variable read when the field's own variable is unset."""

    env_aliases: ClassVar[dict[str, str]] = {}

    def problems(self) -> list[str]:
        return []


class KafkaSettings(Section, frozen=True, kw_only=True):
    bootstrap: str = "127.0.0.1:9092"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    client_id: str = "shoal"
    session_timeout_ms: PositiveInt = 6_000  # a killed member's partitions move on within seconds
    heartbeat_interval_ms: PositiveInt = 500
    max_poll_interval_ms: PositiveInt = 300_000
    request_timeout_ms: PositiveInt = 30_000
    # how long the broker holds a fetch that finds no new data. Kept short: a consumer with one partition's
    # records in hand fetches the others alone, and new records of that partition wait for that fetch to end
    # (500 ms, the client's default, delayed a plan by up to half a second behind a busy handler)
    fetch_max_wait_ms: PositiveInt = 50

    def problems(self) -> list[str]:
        found = []
        if self.security_protocol.startswith("SASL_"):
            for name in ("sasl_mechanism", "sasl_username", "sasl_password"):
                if not getattr(self, name):
                    found.append(f"{PREFIX}KAFKA_{name.upper()}: required when security_protocol is "
                                 f"{self.security_protocol}")
        if self.heartbeat_interval_ms * 3 > self.session_timeout_ms:
            found.append(f"{PREFIX}KAFKA_HEARTBEAT_INTERVAL_MS: must be at most a third of session_timeout_ms "
                         f"({self.session_timeout_ms})")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            found.append(f"{PREFIX}KAFKA_SSL_CERTFILE and {PREFIX}KAFKA_SSL_KEYFILE: set both or neither")
        return found


class RedisSettings(Section, frozen=True, kw_only=True):
    url: str = "redis://127.0.0.1:6379/0"  # rediss:// for TLS
    username: str | None = None  # ACL user
    password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    snapshot_retain_s: PositiveInt = 300  # how long a superseded snapshot revision stays readable
    max_connections: PositiveInt = 64  # per process; a call waits for a free connection (bursts of binds)
    pool_timeout_s: PositiveFloat = 20.0  # …this long at most, then it fails as a transient error

    def problems(self) -> list[str]:
        if not self.url.startswith(("redis://", "rediss://", "unix://")):
            return [f"{PREFIX}REDIS_URL: must start with redis://, rediss:// or unix://, got {self.url!r}"]
        return []


class KubeSettings(Section, frozen=True, kw_only=True):
    env_aliases: ClassVar[dict[str, str]] = {"kubeconfig": "SHOAL_KUBECONFIG"}  # as `shoal dev up` prints

    kubeconfig: str | None = None  # path (SHOAL_KUBE_KUBECONFIG or SHOAL_KUBECONFIG); unset: $KUBECONFIG, ~/.kube/config, in-cluster
    context: str | None = None
    in_cluster: bool = False
    request_timeout_s: PositiveFloat = 30.0
    watch_timeout_s: PositiveInt = 300

    def problems(self) -> list[str]:
        if self.in_cluster and self.kubeconfig:
            return [f"{PREFIX}KUBE_IN_CLUSTER and {PREFIX}KUBE_KUBECONFIG: set one, not both"]
        return []


class HttpSettings(Section, frozen=True, kw_only=True):
    host: str = "127.0.0.1"
    port: Port = 8080


class ServiceSettings(Section, frozen=True, kw_only=True):
    """The pieces every service shares; services subclass it and add defaulted fields."""

    shard: str = "default"  # node pool this instance serves
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    topic_prefix: str = ""  # prepended to every topic name (tests, several stacks on one broker)
    kafka: KafkaSettings = KafkaSettings()
    redis: RedisSettings = RedisSettings()
    kube: KubeSettings = KubeSettings()
    http: HttpSettings = HttpSettings()


S = TypeVar("S", bound=Section)


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Section)


def _is_sequence(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _is_sequence(typing.get_args(tp)[0])
    return origin in (tuple, list, frozenset)


def _read(cls: type[S], env: Mapping[str, str], prefix: str, problems: list[str]) -> S | None:
    hints = typing.get_type_hints(cls, include_extras=True)
    values: dict[str, Any] = {}
    for field in msgspec.structs.fields(cls):
        tp = hints[field.name]
        var = prefix + field.name.upper()
        if _is_section(tp):
            nested = _read(tp, env, var + "_", problems)
            if nested is not None:
                values[field.name] = nested
            continue
        raw = env.get(var, "")
        if raw == "" and field.name in cls.env_aliases:
            var = cls.env_aliases[field.name]
            raw = env.get(var, "")
        if raw == "":
            continue
        value: Any = [part.strip() for part in raw.split(",") if part.strip()] if _is_sequence(tp) else raw
        try:
            values[field.name] = msgspec.convert(value, tp, strict=False)
        except msgspec.ValidationError as exc:
            problems.append(f"{var}={raw!r}: {exc}")
    try:
        section = cls(**values)
    except (TypeError, msgspec.ValidationError) as exc:
        problems.append(f"{prefix}*: {exc}")
        return None
    problems.extend(section.problems())
    return section


def load_settings(cls: type[S], env: Mapping[str, str] | None = None, prefix: str = PREFIX) -> S:
    """Build `cls` from the environment; raise `ConfigError` listing every invalid value."""
    problems: list[str] = []
    settings = _read(cls, os.environ if env is None else env, prefix, problems)
    if problems or settings is None:
        raise ConfigError(problems)
    return settings


def settings_or_exit(cls: type[S], env: Mapping[str, str] | None = None) -> S:
    """`load_settings`, or print each problem to stderr and exit with status 2."""
    try:
        return load_settings(cls, env)
    except ConfigError as exc:
        print("invalid settings:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        raise SystemExit(2) from None


def redacted(settings: Section) -> dict[str, Any]:
    """The settings as a dict for a start-up log line, with passwords replaced by '***'."""
    out: dict[str, Any] = {}
    for name in settings.__struct_fields__:
        value = getattr(settings, name)
        if isinstance(value, Section):
            out[name] = redacted(value)
        elif "password" in name and value:
            out[name] = "***"
        else:
            out[name] = value
    return out
