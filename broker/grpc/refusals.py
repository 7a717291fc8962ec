"""What the consumer RPCs refuse with: `PopService`'s `HeaderFieldError` as a 5.x `Status`.

`broker.grpc.status.from_remoting` maps the response code; a few refusals say more through the
field they name, and 5.x clients act on those codes: a bad receipt handle (INVALID_RECEIPT_HANDLE:
the message is not in flight under it any more), an invisible time out of bounds
(ILLEGAL_INVISIBLE_TIME), a queue id the topic does not have (BAD_REQUEST).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import structlog

from broker.grpc.methods import Message
from broker.grpc.status import from_remoting, status
from broker.pop.checks import refuse
from broker.pop.service import PopService
from protocol.admin_group import SubscriptionGroupConfig
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = structlog.get_logger()

#: the field a refusal names -> its 5.x code, before the response code's own
FIELD_TO_V5: Final[dict[str, str]] = {
    "extraInfo": "INVALID_RECEIPT_HANDLE",
    "invisibleTime": "ILLEGAL_INVISIBLE_TIME",
    "consumerGroup": "CONSUMER_GROUP_NOT_FOUND",
}


def refusal(exc: HeaderFieldError) -> Message:
    """The `Status` of a refusal `PopService` raised."""
    if exc.response_code == ResponseCode.NO_PERMISSION:
        return status("FORBIDDEN", str(exc))
    name = FIELD_TO_V5.get(exc.field)
    if name is not None and exc.response_code != ResponseCode.SYSTEM_ERROR:
        return status(name, str(exc))
    if exc.response_code == ResponseCode.SYSTEM_ERROR:
        log.warning("grpc_consume_failed", field=exc.field, reason=str(exc))
    return from_remoting(exc.response_code, str(exc))


def pop_service(broker: BrokerContext) -> PopService:
    pop = broker.pop
    if pop is None or broker.consume is None:
        raise refuse(ResponseCode.SYSTEM_ERROR, "pop consumption is not served by a slave broker")
    return pop


async def check_group(broker: BrokerContext, group: str) -> SubscriptionGroupConfig:
    """The group's config: it exists (or may be created) and may consume."""
    config = await broker.groups.find_or_create(group)
    if config is None:
        raise refuse(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group [{group}] does not exist",
            "consumerGroup",
        )
    if not config.consume_enable:
        raise refuse(
            ResponseCode.NO_PERMISSION,
            f"subscription group no permission, {group}",
            "consumerGroup",
        )
    return config
