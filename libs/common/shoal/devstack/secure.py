"""Kafka and Redis as a production cluster runs them: encrypted and authenticated (SPEC §8).

    transports = start_secure(state_dir)        # a CA, Kafka on SASL_SSL (SCRAM-SHA-512), Redis on TLS + ACL
    env = {**stack.env(), **transports.env()}   # what every Shoal service is given to connect through them
    stop_secure(state_dir)

Kafka has one client listener, SASL_SSL, whose users exist only as SCRAM-SHA-512 credentials written at
storage format (`admin` for the broker itself, `shoal` for the services); the broker speaks SASL_SSL to
itself too, and only the KRaft controller listener is plaintext (loopback, broker-internal). Redis listens
on TLS only (`--port 0`), its `default` user is off and the `shoal` user is the only one that can log in.
Both servers present a certificate for 127.0.0.1 signed by the state directory's own CA; clients verify it.
The settings a service gets (`env()`) are the ones docs/deploy.md lists for production.
"""

from __future__ import annotations

import secrets
import socket
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from shoal.devstack import components
from shoal.devstack.errors import DevStackError
from shoal.devstack.pki import Pki, make_pki
from shoal.devstack.procs import ProcessSpec, free_port, launch, port_open, stop_process, wait_ready

MECHANISM = "SCRAM-SHA-512"
USER = "shoal"


@dataclass(frozen=True)
class SecureTransports:
    kafka_bootstrap: str
    redis_url: str
    ca_file: Path
    user: str
    password: str

    def env(self, *, password: str | None = None) -> dict[str, str]:
        """The services' settings for these servers (`password` overrides the right one, for failure tests)."""
        secret = self.password if password is None else password
        return {
            "SHOAL_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "SHOAL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "SHOAL_KAFKA_SASL_MECHANISM": MECHANISM,
            "SHOAL_KAFKA_SASL_USERNAME": self.user,
            "SHOAL_KAFKA_SASL_PASSWORD": secret,
            "SHOAL_KAFKA_SSL_CAFILE": str(self.ca_file),
            "SHOAL_REDIS_URL": self.redis_url,
            "SHOAL_REDIS_USERNAME": self.user,
            "SHOAL_REDIS_PASSWORD": secret,
            "SHOAL_REDIS_SSL_CAFILE": str(self.ca_file),
        }


def _kafka(state: Path, pki: Pki, port: int, admin_password: str, password: str) -> tuple[ProcessSpec, list[str]]:
    spec, fmt = components.kafka(state, port, free_port())
    props = state / "kafka" / "server.properties"
    keystore = state / "kafka" / "broker.pem"  # PKCS#8 key and its certificate, as Kafka's PEM keystore reads
    keystore.write_text(pki.serving_key.read_text() + pki.serving_cert.read_text())
    keystore.chmod(0o600)
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
            f'password="{admin_password}";')
    lines = []
    for line in props.read_text().splitlines():
        key, _, value = line.partition("=")
        if key in ("listeners", "advertised.listeners"):
            value = value.replace("PLAINTEXT://", "SASL_SSL://")
        elif key == "inter.broker.listener.name":
            value = "SASL_SSL"
        elif key == "listener.security.protocol.map":
            value = "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
        lines.append(f"{key}={value}" if key else line)
    lines += [
        f"sasl.enabled.mechanisms={MECHANISM}",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config={jaas}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pki.ca_cert}",
        "",
    ]
    props.write_text("\n".join(lines))
    fmt = [*fmt, "--add-scram", f"{MECHANISM}=[name=admin,password={admin_password}]",
           "--add-scram", f"{MECHANISM}=[name={USER},password={password}]"]
    bootstrap = f"127.0.0.1:{port}"
    ready = ProcessSpec(name=spec.name, argv=spec.argv, env=spec.env,
                        ready=lambda: port_open(port) and _kafka_ready(bootstrap, pki.ca_cert, password),
                        ready_timeout_s=spec.ready_timeout_s)
    return ready, fmt


def _kafka_ready(bootstrap: str, ca: Path, password: str) -> bool:
    async def probe() -> bool:
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.helpers import create_ssl_context

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000,
                                    security_protocol="SASL_SSL", sasl_mechanism=MECHANISM,
                                    sasl_plain_username=USER, sasl_plain_password=password,
                                    ssl_context=create_ssl_context(cafile=str(ca)))
        try:
            await admin.start()
            return bool((await admin.describe_cluster()).get("brokers"))
        finally:
            await admin.close()

    return components.run_coroutine_in_thread(probe, timeout_s=10)


def _redis(state: Path, pki: Pki, port: int, password: str) -> ProcessSpec:
    spec = components.redis(state, port)
    acl = state / "redis" / "users.acl"
    acl.write_text(f"user default off\nuser {USER} on >{password} ~* &* +@all\n")
    acl.chmod(0o600)
    argv = list(spec.argv)
    argv[argv.index("--port") + 1] = "0"  # no plaintext port at all
    argv += ["--tls-port", str(port), "--tls-cert-file", str(pki.serving_cert), "--tls-key-file",
             str(pki.serving_key), "--tls-ca-cert-file", str(pki.ca_cert), "--tls-auth-clients", "no",
             "--aclfile", str(acl)]
    return ProcessSpec(name=spec.name, argv=argv, env=spec.env, ready=lambda: _redis_ready(port, pki.ca_cert, password),
                       ready_timeout_s=spec.ready_timeout_s)


def _redis_ready(port: int, ca: Path, password: str) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(f"AUTH {USER} {password}\r\nPING\r\n".encode())
        reply = b""
        while b"PONG" not in reply and b"-" not in reply[:1]:
            chunk = tls.recv(64)
            if not chunk:
                break
            reply += chunk
        return reply.startswith(b"+OK\r\n+PONG")


def start_secure(state: Path, *, tie_to_parent: bool = False) -> SecureTransports:
    """Start Kafka (SASL_SSL) and Redis (TLS + ACL) with their own CA under `state`; wait until both serve."""
    state.mkdir(parents=True, exist_ok=True)
    pki = make_pki(state / "pki")
    password, admin_password = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    kafka_port, redis_port = free_port(), free_port()
    kafka_spec, kafka_format = _kafka(state, pki, kafka_port, admin_password, password)
    formatted = subprocess.run(kafka_format, capture_output=True, text=True, timeout=120)
    if formatted.returncode != 0:
        detail = (formatted.stderr.strip() or formatted.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise DevStackError(f"kafka storage format (SASL_SSL) failed: {detail[0]}")
    redis_spec = _redis(state, pki, redis_port, password)
    pids = {spec.name: launch(state, spec, tie_to_parent=tie_to_parent) for spec in (kafka_spec, redis_spec)}
    try:
        for spec in (redis_spec, kafka_spec):
            wait_ready(state, spec, pids[spec.name])
    except DevStackError:
        stop_secure(state)
        raise
    return SecureTransports(kafka_bootstrap=f"127.0.0.1:{kafka_port}", redis_url=f"rediss://127.0.0.1:{redis_port}/0",
                            ca_file=pki.ca_cert, user=USER, password=password)


def stop_secure(state: Path) -> None:
    for name in ("kafka", "redis"):
        stop_process(state, name)

