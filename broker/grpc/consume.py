"""The consumer RPCs of the RocketMQ 5 service (none yet: they are answered UNIMPLEMENTED)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.grpc.methods import Method

if TYPE_CHECKING:
    from broker.context import BrokerContext


def consume_methods(broker: BrokerContext) -> dict[str, Method]:
    del broker
    return {}
