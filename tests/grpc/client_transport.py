"""Run by the official RocketMQ 5 client's interpreter (.venv-rmq5), never imported by tests:
`python client_transport.py ENDPOINT TOPIC [tls]` calls QueryRoute through the client's generated
stub, then starts a producer against ENDPOINT and sends one message, over TLS with a third
argument (trusting $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, as the client does); it prints one JSON line:
{"query_route": <gRPC status name>, "startup": ..., "send": "ok" | <the error's text>, ...}."""

import json
import sys
import time

import grpc
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc


def query_route(endpoint: str, topic: str, tls: bool) -> str:
    channel = (
        grpc.secure_channel(endpoint, grpc.ssl_channel_credentials())
        if tls
        else grpc.insecure_channel(endpoint)
    )
    with channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
        try:
            stub.QueryRoute(request, timeout=10)
        except grpc.RpcError as exc:
            return str(exc.code().name)
    return "OK"


def main() -> None:
    endpoint, topic = sys.argv[1], sys.argv[2]
    tls = sys.argv[3:] == ["tls"]
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,), tls_enable=tls)
    result: dict[str, object] = {"query_route": query_route(endpoint, topic, tls)}
    started = time.monotonic()
    try:
        producer.startup()
        result["startup"] = "ok"
    except Exception as exc:
        result["startup"] = f"{type(exc).__name__}: {exc}"
    message = Message()
    message.topic = topic
    message.body = b"hello"
    try:
        producer.send(message)
        result["send"] = "ok"
    except Exception as exc:
        result["send"] = f"{type(exc).__name__}: {exc}"
    result["seconds"] = time.monotonic() - started
    try:
        producer.shutdown()
    except Exception as exc:
        result["shutdown"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
