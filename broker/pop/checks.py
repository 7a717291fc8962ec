"""The bounds of pop consumption's requests, and the refusal they raise: `HeaderFieldError`
with 5.x's response code and a remark naming the field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from broker.pop.receipt import Receipt, ReceiptError
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError

if TYPE_CHECKING:
    from broker.subscription_group import SubscriptionGroupManager
    from protocol.admin_group import SubscriptionGroupConfig

#: the shortest and longest invisible time a pop may ask for, ms; a change may ask for 0 (the
#: message is visible again at once), as RocketMQ 5's proxy allows: a push consumer that has no
#: backoff for its failed message (the Node.js client reads none from a customized one) asks
#: for it back now
MIN_INVISIBLE_MS: Final = 1_000
MAX_INVISIBLE_MS: Final = 12 * 3600 * 1000


def refuse(code: int, remark: str, field: str = "topic") -> HeaderFieldError:
    return HeaderFieldError(field, remark, code)


def parse_receipt(extra: str) -> Receipt:
    try:
        return Receipt.parse(extra)
    except ReceiptError as exc:
        raise refuse(ResponseCode.INVALID_PARAMETER, str(exc), "extraInfo") from None


def check_invisible(invisible_ms: int, *, minimum: int = MIN_INVISIBLE_MS) -> None:
    if not minimum <= invisible_ms <= MAX_INVISIBLE_MS:
        raise refuse(
            ResponseCode.INVALID_PARAMETER,
            f"invisibleTime {invisible_ms} ms is not within {minimum}..{MAX_INVISIBLE_MS} ms",
            "invisibleTime",
        )


def check_receipt_names(receipt: Receipt, queue_id: int, offset: int, broker_name: str) -> None:
    """The receipt handle names the message of the request, on this broker."""
    if receipt.queue_id != queue_id or receipt.queue_offset != offset:
        raise refuse(
            ResponseCode.INVALID_PARAMETER,
            f"the receipt handle names queue {receipt.queue_id} offset "
            f"{receipt.queue_offset}, the request queue {queue_id} offset {offset}",
            "extraInfo",
        )
    if receipt.broker_name != broker_name:
        raise refuse(
            ResponseCode.INVALID_PARAMETER,
            f"the receipt handle is of broker {receipt.broker_name[:64]!r}, this is {broker_name}",
            "extraInfo",
        )


async def check_group(groups: SubscriptionGroupManager, group: str) -> SubscriptionGroupConfig:
    """The group's config: it exists (or may be created) and may consume."""
    config = await groups.find_or_create(group)
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
