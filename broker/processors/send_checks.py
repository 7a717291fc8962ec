"""The checks of the send path before a message is built (RocketMQ 4.9.7 `msgCheck`, in order).

Topic validity, forbidden system topics, topic lookup with auto-creation from the template
topic, queue id range, the retry/DLQ redirection of `%RETRY%` topics, and property pairs that
could not be stored as one pair. A failed check raises
`HeaderFieldError` carrying upstream's response code and remark; the processor answers it.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Final, NamedTuple

from broker.context import BrokerContext
from broker.processors import RequestContext
from broker.processors.namesrv import FAQ_SUFFIX
from broker.rewrites import dead_letter_topic, past_retry_limit, retry_group
from broker.topic_config import (
    NOT_ALLOWED_SEND_TOPICS,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfig,
)
from protocol import names
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError
from protocol.headers import SendMessageRequestHeader
from protocol.properties import NAME_VALUE_SEPARATOR

#: TopicSysFlag bits set on topics auto-created by unit-mode producers
_FLAG_UNIT: Final = 0x1
_FLAG_UNIT_SUB: Final = 0x2
#: topic names that passed `check_topic_name`, forgotten all at once past `_MAX_VALID_TOPICS`
_VALID_TOPICS: Final[set[str]] = set()
_MAX_VALID_TOPICS: Final = 4096


def _reject(field: str, code: int, remark: str) -> HeaderFieldError:
    return HeaderFieldError(field, remark, code)


def check_topic_name(topic: str) -> None:
    """TopicValidator.validateTopic: blank, characters, length (all SYSTEM_ERROR upstream).
    A name that passed is remembered (a few thousand at most): the check is per send."""
    if topic in _VALID_TOPICS:
        return
    names.check_topic_name("topic", topic)
    if len(_VALID_TOPICS) >= _MAX_VALID_TOPICS:
        _VALID_TOPICS.clear()
    _VALID_TOPICS.add(topic)


def check_broker_accepts(topic: str, broker: BrokerContext, now_ms: int) -> None:
    """preSend steps 2 and 3: the start-time gate, and a broker without WRITE permission
    refusing order topics (4.9.7 checks only those here)."""
    config = broker.config
    start = config.start_accept_send_request_time_stamp
    if now_ms < start:
        until = datetime.datetime.fromtimestamp(start / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")
        raise _reject(
            "topic", ResponseCode.SYSTEM_ERROR, f"broker unable to service, until {until[:-3]}"
        )
    if not config.broker_permission & PERM_WRITE:
        found = broker.topics.find(topic)
        if found is not None and found.order:
            raise _reject(
                "topic",
                ResponseCode.NO_PERMISSION,
                f"the broker[{config.store_host_ip}] sending message is forbidden",
            )


def check_property_pairs(props: Mapping[str, str], where: str = "") -> None:
    """A value holding the name-value separator \\x01 is refused (MESSAGE_ILLEGAL): readers
    split such a pair differently (Java at its first \\x01, the C++ client drops it), so it
    would not be stored as one pair. Names cannot hold it: they end at the first one."""
    if NAME_VALUE_SEPARATOR not in "".join(props.values()):
        return  # one search of all the values, the pairs only to name the bad one
    for name, value in props.items():
        if NAME_VALUE_SEPARATOR in value:
            raise _reject(
                "properties",
                ResponseCode.MESSAGE_ILLEGAL,
                f"{where}the value of message property {name[:64]} holds the name-value "
                "separator \\x01",
            )


def check_allowed(topic: str) -> None:
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise _reject(
            "topic", ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
        )


def find_or_create_topic(header: SendMessageRequestHeader, broker: BrokerContext) -> TopicConfig:
    """The topic's config, auto-created from `header.default_topic` when allowed (in memory:
    the caller persists the table)."""
    topics = broker.topics
    found = topics.find(header.topic)
    if found is not None:
        return found
    is_retry = header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
    sys_flag = 0
    if header.unit_mode:
        sys_flag = _FLAG_UNIT_SUB if is_retry else _FLAG_UNIT
    created = topics.create_in_send(
        header.topic, header.default_topic, header.default_topic_queue_nums, sys_flag
    )
    if created is None and is_retry:
        created = topics.create_in_send_back(header.topic, 1, PERM_READ | PERM_WRITE, sys_flag)
    if created is None:
        raise _reject(
            "topic",
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{header.topic}] not exist, apply first please!{FAQ_SUFFIX}",
        )
    return created


def check_queue_id(queue_id: int, topic_config: TopicConfig, ctx: RequestContext) -> None:
    queues = max(topic_config.write_queue_nums, topic_config.read_queue_nums)
    if queue_id >= queues:
        raise _reject(
            "queueId",
            ResponseCode.SYSTEM_ERROR,
            f"request queueId[{queue_id}] is illegal, {topic_config} Producer: {ctx.remote_text}",
        )


class Destination(NamedTuple):
    """Where a single message goes after the retry/DLQ decision."""

    topic: str
    queue_id: int
    dead_letter: bool


def retry_or_dlq(
    header: SendMessageRequestHeader, queue_id: int, version: int, broker: BrokerContext
) -> Destination:
    """handleRetryAndDLQ: a `%RETRY%<group>` message past its retry limit goes to `%DLQ%<group>`
    (`rewrites.past_retry_limit`).

    An unknown group is created when auto-creation is on (SUBSCRIPTION_GROUP_NOT_EXIST
    otherwise), and so is the DLQ topic, in memory: the caller persists the tables.
    """
    group = retry_group(header.topic)
    if group is None:
        return Destination(header.topic, queue_id, False)
    broker.groups.ensure(group)
    group_config = broker.groups.find(group)
    if group_config is None:
        raise _reject(
            "topic",
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group not exist, {group} {FAQ_SUFFIX}",
        )
    if not past_retry_limit(
        header.reconsume_times or 0,
        group_config.retry_max_times,
        version,
        header.max_reconsume_times,
    ):
        return Destination(header.topic, queue_id, False)
    dlq, _ = dead_letter_topic(broker.topics, group)
    return Destination(dlq.topic_name, 0, True)
