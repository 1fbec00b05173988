"""Typed settings from `SHOAL_*` environment variables, one settings object per service.

A field `x` of the settings struct is read from `SHOAL_X`; a nested struct field `kafka` gives its own fields
the prefix `SHOAL_KAFKA_` (so `SHOAL_KAFKA_BOOTSTRAP`, `SHOAL_REDIS_URL`, `SHOAL_HTTP_PORT`, ...). Empty or
unset variables keep the default. Comma-separated values fill tuple fields. Every invalid value is reported
together in one `ConfigError`; `settings_or_exit` prints them and exits with status 2.

Each field says in one line what it is (`doc`, msgspec's `Meta(description=...)`); a struct's docstring titles its
group. `variables` lists what a struct reads and `settings_help` renders it for `--help`, so the help is the
declarations themselves.

Usage (in `services/<name>/config.py`; `shoal.adapters.startup` reads them in `__main__.py`)::

    class PlannerSettings(ServiceSettings, frozen=True, kw_only=True):
        cycle_interval_s: Annotated[PositiveFloat, doc("seconds between planning cycles")] = 1.0

    settings = settings_or_exit(PlannerSettings)      # SHOAL_CYCLE_INTERVAL_S=0.5
    print(settings_help(PlannerSettings))             # SHOAL_CYCLE_INTERVAL_S  float (> 0), default 1.0 ...
"""

from __future__ import annotations

import os
import sys
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, NoReturn, TypeVar

import msgspec
from msgspec import Meta

from shoal.core.model import DEFAULT_RESERVATION_NAMESPACE
from shoal.core.sharing_mode import parse_pool_modes
from shoal.errors import ConfigError

PREFIX = "SHOAL_"

Port = Annotated[int, Meta(ge=0, le=65535)]
PositiveInt = Annotated[int, Meta(gt=0)]
PositiveFloat = Annotated[float, Meta(gt=0)]
NonNegativeInt = Annotated[int, Meta(ge=0)]


def doc(text: str) -> Meta:
    """A field's one-line description, as `--help` prints it: `x: Annotated[int, doc("what x is")] = 1`."""
    return Meta(description=text)


class Section(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every settings struct; override `problems` for checks that involve several fields.
    `env_aliases` maps a field to another variable read when the field's own variable is unset."""

    env_aliases: ClassVar[dict[str, str]] = {}

    def problems(self) -> list[str]:
        return []


class KafkaSettings(Section, frozen=True, kw_only=True):
    """Kafka: the brokers, how to reach them, consumer-group timing."""

    bootstrap: Annotated[str, doc("brokers to bootstrap from, host:port (comma-separated)")] = "127.0.0.1:9092"
    security_protocol: Annotated[Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
                                 doc("how the brokers are spoken to")] = "PLAINTEXT"
    sasl_mechanism: Annotated[Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None,
                              doc("SASL mechanism (required with SASL_*)")] = None
    sasl_username: Annotated[str | None, doc("SASL user (required with SASL_*)")] = None
    sasl_password: Annotated[str | None, doc("SASL password (required with SASL_*; keep it in a Secret)")] = None
    ssl_cafile: Annotated[str | None, doc("CA bundle of the brokers' certificates (default: the system's)")] = None
    ssl_certfile: Annotated[str | None, doc("client certificate for mutual TLS (with the key below)")] = None
    ssl_keyfile: Annotated[str | None, doc("key of the client certificate")] = None
    client_id: Annotated[str, doc("client id the brokers log and apply quotas by")] = "shoal"
    # a killed member's partitions move on within seconds
    session_timeout_ms: Annotated[PositiveInt, doc("a consumer silent this long leaves its group")] = 6_000
    heartbeat_interval_ms: Annotated[PositiveInt, doc("heartbeats (a third of the session timeout at most)")] = 500
    max_poll_interval_ms: Annotated[PositiveInt, doc("a consumer not polling this long leaves its group")] = 300_000
    request_timeout_ms: Annotated[PositiveInt, doc("how long one request to a broker may take")] = 30_000
    # how long the broker holds a fetch that finds no new data. Kept short: a consumer with one partition's
    # records in hand fetches the others alone, and new records of that partition wait for that fetch to end
    # (500 ms, the client's default, delayed a plan by up to half a second behind a busy handler)
    fetch_max_wait_ms: Annotated[PositiveInt, doc("how long a broker holds a fetch that finds no new data")] = 50
    # a fetch asking for every partition of the consumer ends at the next record of any, so it may wait long:
    # an idle consumer then asks twice a second instead of twenty times (`shoal.adapters.kafka_fetch`); one not
    # above fetch_max_wait_ms leaves every fetch at that wait
    idle_fetch_wait_ms: Annotated[PositiveInt, doc("how long a broker holds a fetch for all of a consumer's "
                                                   "partitions that finds no new data")] = 500
    # a plan carries every bind of its cycle (~370 bytes each): a backlog of 5,000 pods that all fit made a 1.8 MB
    # plan, over Kafka's 1 MB default, and scheduling stopped. Producers, consumers and the topics Shoal creates
    # take messages up to this size (an existing topic keeps its own max.message.bytes)
    max_message_bytes: Annotated[PositiveInt, doc("largest message sent or read (a plan with all its binds)")] = (
        32 * 1024 * 1024)
    # a commit is a round trip the consumer waits for before its next records: at most one per interval (a
    # crash redelivers what was handled since, which handlers tolerate; a stop or a rebalance commits it all)
    commit_interval_ms: Annotated[NonNegativeInt,
                                  doc("done offsets committed at most this often (0: after every batch)")] = 200

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
        if self.idle_fetch_wait_ms >= self.request_timeout_ms:
            found.append(f"{PREFIX}KAFKA_IDLE_FETCH_WAIT_MS: must be less than request_timeout_ms "
                         f"({self.request_timeout_ms})")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            found.append(f"{PREFIX}KAFKA_SSL_CERTFILE and {PREFIX}KAFKA_SSL_KEYFILE: set both or neither")
        return found


class RedisSettings(Section, frozen=True, kw_only=True):
    """Redis: snapshots, fair-share figures, in-flight leases."""

    url: Annotated[str, doc("redis://host:port/db, rediss:// for TLS, unix:// for a socket")] = (
        "redis://127.0.0.1:6379/0")
    username: Annotated[str | None, doc("ACL user")] = None
    password: Annotated[str | None, doc("password of the ACL user (or requirepass)")] = None
    ssl_cafile: Annotated[str | None, doc("CA bundle of the server's certificate (rediss://)")] = None
    ssl_certfile: Annotated[str | None, doc("client certificate for mutual TLS (rediss://)")] = None
    ssl_keyfile: Annotated[str | None, doc("key of the client certificate")] = None
    snapshot_retain_s: Annotated[PositiveInt, doc("how long a superseded snapshot revision stays readable")] = 300
    # a burst of binds queues on the pool rather than failing
    max_connections: Annotated[PositiveInt, doc("connections per process; a call beyond them waits for one")] = 64
    pool_timeout_s: Annotated[PositiveFloat, doc("a call waits this long for one, then fails as transient")] = 20.0

    def problems(self) -> list[str]:
        if not self.url.startswith(("redis://", "rediss://", "unix://")):
            return [f"{PREFIX}REDIS_URL: must start with redis://, rediss:// or unix://, got {self.url!r}"]
        return []


class KubeSettings(Section, frozen=True, kw_only=True):
    """The Kubernetes API: where its configuration comes from, how long calls may take."""

    env_aliases: ClassVar[dict[str, str]] = {"kubeconfig": "SHOAL_KUBECONFIG"}  # as `shoal dev up` prints

    kubeconfig: Annotated[str | None, doc("kubeconfig file; unset: $KUBECONFIG, ~/.kube/config, in-cluster")] = None
    context: Annotated[str | None, doc("kubeconfig context (default: the file's current context)")] = None
    in_cluster: Annotated[bool, doc("the pod's service account, never a kubeconfig file")] = False
    request_timeout_s: Annotated[PositiveFloat, doc("how long one API call may take")] = 30.0
    watch_timeout_s: Annotated[PositiveInt, doc("a watch ends after this long and is opened again")] = 300

    def problems(self) -> list[str]:
        if self.in_cluster and self.kubeconfig:
            return [f"{PREFIX}KUBE_IN_CLUSTER and {PREFIX}KUBE_KUBECONFIG: set one, not both"]
        return []


class HttpSettings(Section, frozen=True, kw_only=True):
    """The health and metrics server: /healthz, /readyz, /metrics."""

    host: Annotated[str, doc("address it listens on (0.0.0.0 in a pod)")] = "127.0.0.1"
    port: Annotated[Port, doc("its port (0 picks a free one)")] = 8080


class ServiceSettings(Section, frozen=True, kw_only=True):
    """The pieces every service shares; services subclass it and add defaulted fields."""

    shard: Annotated[str, doc("node pool this instance serves")] = "default"
    log_level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], doc("least severe log records written")] = (
        "INFO")
    topic_prefix: Annotated[str, doc("prepended to every topic name (tests, several stacks on one broker)")] = ""
    start_timeout_s: Annotated[PositiveFloat, doc("start-up waits this long for its dependencies (then exit 3)")] = 30.0
    event_loop: Annotated[Literal["uvloop", "asyncio"], doc("the asyncio event loop: uvloop's (libuv), or the "
                                                            "standard library's")] = "uvloop"
    kafka: KafkaSettings = KafkaSettings()
    redis: RedisSettings = RedisSettings()
    kube: KubeSettings = KubeSettings()
    http: HttpSettings = HttpSettings()


GPU_SHARING_MODES = ("NonMemoryEnforced", "HamiCore", "NvFractions", "Disabled")  # = shoal.core.sharing_mode.MODES


class GpuSharingServiceSettings(ServiceSettings, frozen=True, kw_only=True):
    """A service that honours KAI's gpuSharingMode (admission, planner, fairshare, binder, node agent): one name
    for all, and one for the reservation pods' namespace (SPEC §2.8: the binder creates them there, the node
    agent reads them, the planner counts them, admission leaves them alone)."""

    reservation_namespace: Annotated[str, doc("namespace of GPU reservation pods (one setting for every service)")] = (
        DEFAULT_RESERVATION_NAMESPACE)
    gpu_sharing_mode: Annotated[Literal["NonMemoryEnforced", "HamiCore", "NvFractions", "Disabled"],
                                doc("KAI's gpuSharingMode for pools not listed below")] = "NonMemoryEnforced"
    pool_gpu_sharing_modes: Annotated[tuple[str, ...], doc("per node pool: pool-a=NvFractions,pool-b=Disabled")] = ()

    def pool_modes(self) -> dict[str, str]:
        return parse_pool_modes(self.pool_gpu_sharing_modes)[0]

    def mode_for(self, pool: str | None) -> str:
        return self.pool_modes().get(pool or "", self.gpu_sharing_mode)

    def problems(self) -> list[str]:
        return [*super().problems(), *parse_pool_modes(self.pool_gpu_sharing_modes)[1]]


S = TypeVar("S", bound=Section)


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Section)


def _is_sequence(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _is_sequence(typing.get_args(tp)[0])
    return origin in (tuple, list, frozenset)


def _fields(cls: type[Section], prefix: str) -> Iterator[tuple[str, Any, str, Any]]:
    """(field name, type, variable, default) of each field of `cls`; a nested struct's variables start with
    the variable of its field plus `_`."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for field in msgspec.structs.fields(cls):
        default = field.default_factory() if field.default is msgspec.NODEFAULT else field.default
        yield field.name, hints[field.name], prefix + field.name.upper(), default


def _read(cls: type[S], env: Mapping[str, str], prefix: str, problems: list[str]) -> S | None:
    values: dict[str, Any] = {}
    for name, tp, var, _ in _fields(cls, prefix):
        if _is_section(tp):
            nested = _read(tp, env, var + "_", problems)
            if nested is not None:
                values[name] = nested
            continue
        raw = env.get(var, "")
        if raw == "" and name in cls.env_aliases:
            var = cls.env_aliases[name]
            raw = env.get(var, "")
        if raw == "":
            continue
        value: Any = [part.strip() for part in raw.split(",") if part.strip()] if _is_sequence(tp) else raw
        try:
            values[name] = msgspec.convert(value, tp, strict=False)
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


def exit_invalid(problems: Sequence[str]) -> NoReturn:
    """Print each problem to stderr and exit with status 2."""
    print("invalid settings:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    raise SystemExit(2)


def settings_or_exit(cls: type[S], env: Mapping[str, str] | None = None) -> S:
    """`load_settings`, or print each problem to stderr and exit with status 2."""
    try:
        return load_settings(cls, env)
    except ConfigError as exc:
        exit_invalid(exc.problems)


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


@dataclass(frozen=True, slots=True)
class Variable:
    """One variable a settings struct reads: its name (and the other name read when it is unset), its type
    and default, the field's description and the group (the docstring of the nested struct) it belongs to."""

    name: str
    alias: str | None
    type: Any
    default: Any
    description: str
    group: str


def _description(tp: Any) -> str:
    metas = typing.get_args(tp)[1:] if typing.get_origin(tp) is Annotated else ()
    return next((m.description for m in metas if isinstance(m, Meta) and m.description), "")


def _title(cls: type[Section], prefix: str) -> str:
    first = (cls.__doc__ or "").strip().splitlines()[0:1]
    return f"{first[0].rstrip('.') if first else cls.__name__} ({prefix}*)"


def variables(cls: type[Section], prefix: str = PREFIX, group: str = "") -> list[Variable]:
    """Every variable `load_settings(cls)` reads: the struct's own fields first, then each nested struct's."""
    own: list[Variable] = []
    nested: list[Variable] = []
    for name, tp, var, default in _fields(cls, prefix):
        if _is_section(tp):
            nested += variables(tp, var + "_", _title(tp, var + "_"))
        else:
            own.append(Variable(var, cls.env_aliases.get(name), tp, default, _description(tp), group))
    return own + nested


_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def type_text(tp: Any) -> str:
    """A type as `--help` names it: `int (> 0)`, `PLAINTEXT|SSL`, `list of str`, `str`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        bounds = [f"{sign} {getattr(m, key)}" for m in args[1:] if isinstance(m, Meta)
                  for key, sign in _BOUNDS if getattr(m, key) is not None]
        return type_text(args[0]) + (f" ({', '.join(bounds)})" if bounds else "")
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_text(a) for a in args if a is not type(None))
    if origin in (tuple, list, frozenset):
        return f"list of {type_text(args[0])}"
    return getattr(tp, "__name__", str(tp))


def default_text(value: Any) -> str:
    """A default as it would be written in the variable (`true`, `a,b`), or `unset` / `empty`."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list | frozenset):
        return ",".join(str(v) for v in value) or "empty"
    return str(value) if value != "" else "empty"


def settings_help(cls: type[Section]) -> str:
    """The `--help` text of a settings struct: each variable with its type, default and description, grouped."""
    lines: list[str] = []
    group: str | None = None
    for var in variables(cls):
        if var.group != group:
            group = var.group
            lines += ["", f"{group}:"] if group else []
        name = f"{var.name} (or {var.alias})" if var.alias else var.name
        lines.append(f"  {name}  {type_text(var.type)}, default {default_text(var.default)}")
        if var.description:
            lines.append(f"      {var.description}")
    return "\n".join(lines).strip("\n")
