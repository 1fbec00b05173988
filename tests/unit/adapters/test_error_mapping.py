"""Library errors are mapped to Shoal's hierarchy at the edge; client options follow the settings."""

from __future__ import annotations

import aiohttp
import pytest
from aiokafka.errors import KafkaConnectionError, NotLeaderForPartitionError, TopicAuthorizationFailedError
from kubernetes_asyncio.client.exceptions import ApiException
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from shoal.adapters.kafka import client_options, default_classify, kafka_error
from shoal.adapters.kube import Expired, Resource, error_for_status, kube_error
from shoal.adapters.redis_client import redis_error
from shoal.errors import ConflictError, InvariantBroken, NotFoundError, PermanentError, TransientError
from shoal.settings import KafkaSettings


@pytest.mark.parametrize(("status", "expected"), [
    (429, TransientError), (500, TransientError), (503, TransientError), (504, TransientError),
    (409, ConflictError), (404, NotFoundError), (410, Expired), (422, PermanentError), (403, PermanentError),
    (400, PermanentError), (401, PermanentError),
])
def test_kube_statuses(status: int, expected: type) -> None:
    error = error_for_status(status, "msg", "get pods/x")
    assert type(error) is expected
    assert str(status) in str(error) and error.status == status


def test_kube_exceptions() -> None:
    api = ApiException(status=409, reason="Conflict")
    api.body = b'{"kind":"Status","message":"the object has been modified"}'
    mapped = kube_error(api, "replace")
    assert isinstance(mapped, ConflictError) and "the object has been modified" in str(mapped)
    assert isinstance(kube_error(aiohttp.ClientConnectionError("refused")), TransientError)
    assert isinstance(kube_error(TimeoutError()), TransientError)
    assert isinstance(kube_error(ValueError("Invalid value for target")), PermanentError)


def test_resource_paths() -> None:
    pods = Resource("", "v1", "pods", "Pod")
    queues = Resource("scheduling.run.ai", "v2", "queues", "Queue", namespaced=False)
    assert pods.path("ns", "p", "binding") == "/api/v1/namespaces/ns/pods/p/binding"
    assert pods.path() == "/api/v1/pods"
    assert queues.path("ignored", "q1") == "/apis/scheduling.run.ai/v2/queues/q1"
    assert queues.api_version == "scheduling.run.ai/v2"


def test_kafka_and_redis_errors() -> None:
    assert isinstance(kafka_error(KafkaConnectionError("down")), TransientError)
    assert isinstance(kafka_error(NotLeaderForPartitionError()), TransientError)
    assert isinstance(kafka_error(TopicAuthorizationFailedError()), PermanentError)
    assert isinstance(redis_error(RedisConnectionError("down")), TransientError)
    assert isinstance(redis_error(ResponseError("WRONGTYPE")), PermanentError)


def test_handler_error_classification() -> None:
    assert default_classify(InvariantBroken("x")) == "fatal"
    assert default_classify(TransientError("x")) == "transient"
    assert default_classify(ConnectionResetError()) == "transient"
    assert default_classify(PermanentError("x")) == "permanent"
    assert default_classify(KeyError("x")) == "permanent"


def test_kafka_client_options_carry_sasl_and_tls() -> None:
    plain = client_options(KafkaSettings(bootstrap="k:9092"))
    assert plain["security_protocol"] == "PLAINTEXT" and "ssl_context" not in plain
    secure = client_options(KafkaSettings(bootstrap="k:9093", security_protocol="SASL_SSL",
                                          sasl_mechanism="SCRAM-SHA-512", sasl_username="u", sasl_password="p"))
    assert secure["ssl_context"] is not None
    assert (secure["sasl_mechanism"], secure["sasl_plain_username"], secure["sasl_plain_password"]) == (
        "SCRAM-SHA-512", "u", "p")
