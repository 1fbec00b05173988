"""How each server of the stack is started and how its readiness is checked (ProcessSpec per component)."""

from __future__ import annotations

import asyncio
import ssl
import sys
import threading
import uuid
from pathlib import Path

from shoal.devstack import paths
from shoal.devstack.pki import Pki
from shoal.devstack.procs import ProcessSpec, http_ok, port_open, read_pid

KAFKA_JVM_OPTS = [
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
]


def admin_tls(pki: Pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    ctx.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    return ctx


def etcd(state: Path, client_port: int, peer_port: int) -> ProcessSpec:
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return ProcessSpec(
        name="etcd",
        argv=[
            str(paths.etcd_bin()),
            "--name=default",
            f"--data-dir={state / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync",
            "--log-level=warn",
            "--quota-backend-bytes=4294967296",
        ],
        ready=lambda: http_ok(f"{client}/health"),
        ready_timeout_s=30,
    )


def apiserver(state: Path, pki: Pki, etcd_port: int, port: int, node_ip: str | None = None) -> ProcessSpec:
    """The apiserver on 127.0.0.1; with `node_ip` (a real node's stack) on that address instead, where pods
    reach it through the `kubernetes` Service, with ServiceAccount admission and the endpoint reconciler on."""
    host = node_ip or "127.0.0.1"
    # TaintNodesByCondition would taint every new fake node not-ready:NoSchedule, and no node lifecycle
    # controller (no kubelet) would ever lift it. Without a real node no pod needs a ServiceAccount token.
    disabled = "TaintNodesByCondition" if node_ip else "ServiceAccount,TaintNodesByCondition"
    real_node = (
        [
            f"--kubelet-client-certificate={pki.admin_cert}",
            f"--kubelet-client-key={pki.admin_key}",
            # the node's IP on the stack's bridge: never a name the host's resolver would be asked for
            "--kubelet-preferred-address-types=InternalIP",
        ]
        if node_ip
        else ["--endpoint-reconciler-type=none"]
    )
    return ProcessSpec(
        name="kube-apiserver",
        argv=[
            str(paths.k8s_bin("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--bind-address={host}",
            f"--advertise-address={host}",
            f"--secure-port={port}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--token-auth-file={pki.token_file}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer=https://{host}:{port}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            f"--disable-admission-plugins={disabled}",
            # Shoal's admission service is a webhook; both webhook plugins are on by default, named to be sure.
            "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            *real_node,
            f"--cert-dir={state / 'apiserver-certs'}",
            "--profiling=false",
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
            "--v=1",
        ],
        ready=lambda: http_ok(f"https://{host}:{port}/readyz", admin_tls(pki)),
        ready_timeout_s=90,
    )


def secure_serving(kubeconfig: Path, port: int) -> list[str]:
    """Flags of a controller-manager or scheduler: serve on 127.0.0.1:`port`, check callers with the apiserver."""
    return [
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
    ]


# Without a real node: what fake nodes need. With one: every default controller (service accounts, root CA,
# endpoint slices, daemon sets, ...) except the node lifecycle controller, which would mark the fake nodes
# (no kubelet heartbeats) unreachable and evict their pods.
FAKE_NODE_CONTROLLERS = "job,garbagecollector,namespace,disruption,replicaset,deployment,statefulset"
REAL_NODE_CONTROLLERS = "*,-node-lifecycle-controller"


def controller_manager(pki: Pki, kubeconfig: Path, port: int, *, real_node: bool = False) -> ProcessSpec:
    return ProcessSpec(
        name="kube-controller-manager",
        argv=[
            str(paths.k8s_bin("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            *secure_serving(kubeconfig, port),
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}",
            f"--controllers={REAL_NODE_CONTROLLERS if real_node else FAKE_NODE_CONTROLLERS}",
            "--leader-elect=false",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--concurrent-job-syncs=10",
            "--v=1",
        ],
        # /healthz on the secure port needs authn; ours is the admin cert, which the CA signed.
        ready=lambda: http_ok(f"https://127.0.0.1:{port}/healthz", _insecure_admin(pki)),
        ready_timeout_s=60,
    )


def _insecure_admin(pki: Pki) -> ssl.SSLContext:
    """The controller-manager serves a self-signed cert: trust it, but present the admin client cert."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    return ctx


def kafka(state: Path, port: int, controller_port: int) -> tuple[ProcessSpec, list[str]]:
    """The broker's spec and the storage-format command to run before it (KRaft, one combined node)."""
    conf_dir = state / "kafka"
    conf_dir.mkdir(parents=True, exist_ok=True)
    props = conf_dir / "server.properties"
    props.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={conf_dir / 'data'}",
                "num.partitions=1",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=3",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=3",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "num.network.threads=2",
                "num.io.threads=2",
                "auto.create.topics.enable=true",
                "delete.topic.enable=true",
                "log.flush.interval.messages=100000000",
                "",
            ]
        )
    )
    log4j = conf_dir / "log4j2.properties"
    log4j.write_text(
        "status = warn\n"
        "appender.out.type = Console\nappender.out.name = OUT\n"
        "appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = warn\nrootLogger.appenderRef.out.ref = OUT\n"
        "logger.server.name = kafka.server.KafkaRaftServer\nlogger.server.level = info\n"
        "logger.broker.name = kafka.server.BrokerServer\nlogger.broker.level = info\n"
    )
    java = ["java", *KAFKA_JVM_OPTS, f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{paths.kafka_libs()}/*"]
    fmt = [
        *java,
        "kafka.tools.StorageTool",
        "format",
        "-t",
        _cluster_id(),
        "-c",
        str(props),
        "--ignore-formatted",
    ]
    spec = ProcessSpec(
        name="kafka",
        argv=[*java, "kafka.Kafka", str(props)],
        ready=lambda: port_open(port) and kafka_ready(f"127.0.0.1:{port}"),
        ready_timeout_s=90,
    )
    return spec, fmt


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (22 characters), never starting
    with "-" (as Kafka's own ids: the storage tool's argument parser read "-t -x…" as a missing value, which
    failed one stack start in 64)."""
    import base64

    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


def kafka_ready(bootstrap: str) -> bool:
    """True when an admin client can describe the cluster (run on a private loop in a worker thread)."""

    async def probe() -> bool:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
        try:
            await admin.start()
            info = await admin.describe_cluster()
            return bool(info.get("brokers"))
        finally:
            await admin.close()

    return run_coroutine_in_thread(probe, timeout_s=10)


def run_coroutine_in_thread(factory, timeout_s: float):
    """Run `factory()` to completion on a fresh event loop in a worker thread (safe inside pytest's loop)."""
    result: dict[str, object] = {}

    def work() -> None:
        try:
            result["value"] = asyncio.run(asyncio.wait_for(factory(), timeout_s))
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout_s + 5)
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result.get("value", False)


def redis(state: Path, port: int) -> ProcessSpec:
    data = state / "redis"
    data.mkdir(parents=True, exist_ok=True)
    return ProcessSpec(
        name="redis",
        argv=[
            "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(data),
            "--protected-mode",
            "yes",
        ],
        ready=lambda: _redis_ping(port),
        ready_timeout_s=20,
    )


def _redis_ping(port: int) -> bool:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")


def fake_kubelet(state: Path, kubeconfig: Path, delete_delay_s: float) -> ProcessSpec:
    ready_file = state / "fakekubelet.ready"
    ready_file.unlink(missing_ok=True)
    return ProcessSpec(
        name="fakekubelet",
        argv=[
            sys.executable,
            "-m",
            "shoal.devstack.fakekubelet",
            "--kubeconfig",
            str(kubeconfig),
            "--delete-delay",
            str(delete_delay_s),
            "--ready-file",
            str(ready_file),
        ],
        env={"PYTHONUNBUFFERED": "1"},
        ready=lambda: _ready_file_is_current(state, ready_file),
        ready_timeout_s=120,
    )


def _ready_file_is_current(state: Path, ready_file: Path) -> bool:
    """The fake kubelet writes its pid into the ready file: it is ready when that pid is the recorded one."""
    found = read_pid(state, "fakekubelet")
    try:
        return found is not None and int(ready_file.read_text().strip() or 0) == found[0]
    except (OSError, ValueError):
        return False


def probe(name: str, state: Path, port: int | None, apiserver_host: str = "127.0.0.1") -> bool | None:
    """A quick readiness check of a running core component (None when there is no check for `name`)."""
    pki = Pki(state / "pki")
    checks = {
        "etcd": lambda: http_ok(f"http://127.0.0.1:{port}/health"),
        "kube-apiserver": lambda: http_ok(f"https://{apiserver_host}:{port}/readyz", admin_tls(pki)),
        "kube-controller-manager": lambda: http_ok(
            f"https://127.0.0.1:{port}/healthz", _insecure_admin(pki)
        ),
        "kafka": lambda: port_open(port or 0),
        "redis": lambda: _redis_ping(port or 0),
        "fakekubelet": lambda: _ready_file_is_current(state, state / "fakekubelet.ready"),
    }
    check = checks.get(name)
    if check is None or (port is None and name != "fakekubelet"):
        return None
    try:
        return bool(check())
    except Exception:  # noqa: BLE001 - any failure to answer means not ready
        return False
