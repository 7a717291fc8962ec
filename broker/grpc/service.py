"""The RocketMQ 5 service's methods as the gRPC server serves them.

Empty until the service's handlers join: every call is answered UNIMPLEMENTED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.grpc.methods import MethodTable

if TYPE_CHECKING:
    from broker.context import BrokerContext


def methods(broker: BrokerContext, endpoint: tuple[str, int]) -> MethodTable:
    """`:path` -> method for `broker`, whose gRPC clients reach it at `endpoint`."""
    del broker, endpoint
    return {}
