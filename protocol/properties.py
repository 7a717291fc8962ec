"""Message properties: the `name \\x01 value \\x02 ...` string and the names RocketMQ gives keys.

Parsing follows `MessageDecoder.string2messageProperties` (4.9): split on \\x02, skip segments
shorter than 3 characters, split each at its first \\x01, drop a pair whose name or value is
empty; later duplicates win; a trailing \\x02 (the C++ client writes one) is harmless.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"


class MessageConst:
    """Property keys (`MessageConst.java`); the system ones may not be set by users."""

    KEYS: Final = "KEYS"
    TAGS: Final = "TAGS"
    WAIT_STORE_MSG_OK: Final = "WAIT"
    DELAY_TIME_LEVEL: Final = "DELAY"
    RETRY_TOPIC: Final = "RETRY_TOPIC"
    REAL_TOPIC: Final = "REAL_TOPIC"
    REAL_QUEUE_ID: Final = "REAL_QID"
    TRANSACTION_PREPARED: Final = "TRAN_MSG"
    PRODUCER_GROUP: Final = "PGROUP"
    MIN_OFFSET: Final = "MIN_OFFSET"
    MAX_OFFSET: Final = "MAX_OFFSET"
    BUYER_ID: Final = "BUYER_ID"
    ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG: Final = "TRANSFER_FLAG"
    CORRECTION_FLAG: Final = "CORRECTION_FLAG"
    MQ2_FLAG: Final = "MQ2_FLAG"
    RECONSUME_TIME: Final = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
    MSG_REGION: Final = "MSG_REGION"
    TRACE_SWITCH: Final = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX: Final = "UNIQ_KEY"
    CONSUME_START_TIMESTAMP: Final = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID: Final = "INSTANCE_ID"
    CORRELATION_ID: Final = "CORRELATION_ID"
    MESSAGE_REPLY_TO_CLIENT: Final = "REPLY_TO_CLIENT"
    MESSAGE_TTL: Final = "TTL"
    REPLY_MESSAGE_ARRIVE_TIME: Final = "ARRIVE_TIME"
    PUSH_REPLY_TIME: Final = "PUSH_REPLY_TIME"
    MESSAGE_TYPE: Final = "MSG_TYPE"
    CLUSTER: Final = "CLUSTER"
    INNER_MULTI_DISPATCH: Final = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET: Final = "INNER_MULTI_QUEUE_OFFSET"

    #: KEYS holds several business keys separated by this.
    KEY_SEPARATOR: Final = " "

    #: keys reserved for RocketMQ itself (`MessageConst.STRING_HASH_SET`).
    SYSTEM_KEYS: Final = frozenset(
        {
            KEYS,
            TAGS,
            WAIT_STORE_MSG_OK,
            DELAY_TIME_LEVEL,
            RETRY_TOPIC,
            REAL_TOPIC,
            REAL_QUEUE_ID,
            TRANSACTION_PREPARED,
            PRODUCER_GROUP,
            MIN_OFFSET,
            MAX_OFFSET,
            BUYER_ID,
            ORIGIN_MESSAGE_ID,
            TRANSFER_FLAG,
            CORRECTION_FLAG,
            MQ2_FLAG,
            RECONSUME_TIME,
            MAX_RECONSUME_TIMES,
            MSG_REGION,
            TRACE_SWITCH,
            UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
            CONSUME_START_TIMESTAMP,
            TRANSACTION_PREPARED_QUEUE_OFFSET,
            TRANSACTION_CHECK_TIMES,
            CHECK_IMMUNITY_TIME_IN_SECONDS,
            INSTANCE_ID,
            CORRELATION_ID,
            MESSAGE_REPLY_TO_CLIENT,
            MESSAGE_TTL,
            REPLY_MESSAGE_ARRIVE_TIME,
            PUSH_REPLY_TIME,
            MESSAGE_TYPE,
            CLUSTER,
            INNER_MULTI_DISPATCH,
            INNER_MULTI_QUEUE_OFFSET,
        }
    )


def decode_properties(text: str | None) -> dict[str, str]:
    """The properties in `text` (None or "" give an empty dict); never raises."""
    result: dict[str, str] = {}
    if not text:
        return result
    for segment in text.split(PROPERTY_SEPARATOR):
        # A value is empty when the separator is missing: a pair needs a name and a value.
        name, _, value = segment.partition(NAME_VALUE_SEPARATOR)
        if name and value:
            result[name] = value
    return result


def encode_properties(properties: Mapping[str, str | None]) -> str:
    """The properties string for `properties`, None values skipped, no trailing separator.

    Names must not contain \\x01 or \\x02 and values must not contain \\x02 (`ValueError`):
    such a pair could not be read back.
    """
    parts = [
        f"{name}{NAME_VALUE_SEPARATOR}{value}"
        for name, value in properties.items()
        if value is not None
    ]
    if not parts:
        return ""
    text = PROPERTY_SEPARATOR.join(parts)
    # One separator of each kind per pair means no name or value holds one: the pairs are
    # checked one by one only otherwise (a value may hold \x01).
    if text.count(PROPERTY_SEPARATOR) == len(parts) - 1 and text.count(NAME_VALUE_SEPARATOR) == len(
        parts
    ):
        return text
    for name, value in properties.items():
        if value is None:
            continue
        if (
            NAME_VALUE_SEPARATOR in name
            or PROPERTY_SEPARATOR in name
            or PROPERTY_SEPARATOR in value
        ):
            raise ValueError(f"property {name!r} contains a separator character")
    return text
