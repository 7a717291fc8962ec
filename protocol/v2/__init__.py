"""RocketMQ 5's gRPC message types (`apache.rocketmq.v2`) as protobuf classes.

`definition_pb2` and `service_pb2` are the bindings the official Python client
(rocketmq-python-client, generated from apache/rocketmq-apis) ships. They are not kept in git:
`python -m protocol.v2.build` copies them out of the pinned wheel, checked by its SHA-256, and
`make install-run`, `make install-test` and the Dockerfile run it. `load()` imports them and
says how to make them when they are missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Final

#: the modules `build` writes beside this file
GENERATED: Final = ("definition_pb2", "service_pb2")


class BindingsMissingError(RuntimeError):
    """The generated modules are not there: `python -m protocol.v2.build` makes them."""


def load() -> tuple[ModuleType, ModuleType]:
    """`(definition_pb2, service_pb2)`, imported on first use (protobuf costs memory)."""
    try:
        definition = importlib.import_module(f"{__name__}.definition_pb2")
        service = importlib.import_module(f"{__name__}.service_pb2")
    except ModuleNotFoundError as exc:
        if exc.name not in {f"{__name__}.{name}" for name in GENERATED}:
            raise
        raise BindingsMissingError(
            "the RocketMQ 5 gRPC bindings are missing: run `python -m protocol.v2.build` "
            "(make install-run does)"
        ) from exc
    return definition, service
