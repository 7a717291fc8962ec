"""Rules for the names a peer chooses that become keys of the broker's tables.

Topics and groups follow RocketMQ 4.9: `TopicValidator.validateTopic` (non-blank, made of
`[%|a-zA-Z0-9_-]`, at most 127 characters; the broker applies it to every send) and the
client's `Validators.checkGroup` (the same characters, at most `CHARACTER_MAX_LENGTH` 255),
which the broker here applies too, where the group is decoded: a group name from a heartbeat,
a pull or a send back creates a subscription group, a retry topic and offsets, so a name no
RocketMQ client could have sent must not get that far. A client id (`ip@instance[@unit]`) has
no upstream rule: it must be non-blank, printable and at most 255 characters. Errors are
`HeaderFieldError`s (SYSTEM_ERROR) naming the wire field: topic errors in upstream's exact
wording (the send path answers them), the others as `<field>: <upstream's wording>`.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import HeaderFieldError

VALID_NAME_PATTERN: Final = "^[%|a-zA-Z0-9_-]+$"
TOPIC_MAX_LENGTH: Final = 127
#: `Validators.CHARACTER_MAX_LENGTH`, the longest group name a RocketMQ client accepts
GROUP_MAX_LENGTH: Final = 255
CLIENT_ID_MAX_LENGTH: Final = 255
#: the longest topic a consumer can subscribe to: the retry topic of the longest group
#: (`%RETRY%` + group)
SUBSCRIPTION_TOPIC_MAX_LENGTH: Final = len("%RETRY%") + GROUP_MAX_LENGTH
_VALID_NAME: Final = re.compile(r"[%|a-zA-Z0-9_-]+")
#: C0 controls and DEL: never part of a name, and they garble the logs names are written to
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


def check_topic_name(field: str, topic: str) -> str:
    """`topic` if `TopicValidator.validateTopic` accepts it, else `HeaderFieldError`."""
    if not topic.strip():
        raise HeaderFieldError(field, "The specified topic is blank.")
    if _VALID_NAME.fullmatch(topic) is None:
        raise HeaderFieldError(
            field,
            f"The specified topic contains illegal characters, allowing only {VALID_NAME_PATTERN}",
        )
    if len(topic) > TOPIC_MAX_LENGTH:
        raise HeaderFieldError(field, "The specified topic is longer than topic max length.")
    return topic


def check_group_name(field: str, group: str) -> str:
    """`group` if `Validators.checkGroup` accepts it, else `HeaderFieldError`."""
    if not group.strip():
        raise HeaderFieldError(field, f"{field}: the specified group is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise HeaderFieldError(
            field,
            f"{field}: the specified group is longer than group max length {GROUP_MAX_LENGTH}.",
        )
    if _VALID_NAME.fullmatch(group) is None:
        raise HeaderFieldError(
            field,
            f"{field}: the specified group[{_cut(group)}] contains illegal characters, "
            f"allowing only {VALID_NAME_PATTERN}",
        )
    return group


def check_client_id(field: str, client_id: str) -> str:
    """`client_id` if it is non-blank, printable and at most 255 characters."""
    return check_label(field, client_id, "client id", CLIENT_ID_MAX_LENGTH)


def check_label(field: str, text: str, what: str, max_length: int) -> str:
    """`text` if it is non-blank, has no control character and at most `max_length`
    characters: the rule for names that key a table but have no upstream rule."""
    if not text.strip():
        raise HeaderFieldError(field, f"{field}: the {what} is blank")
    if len(text) > max_length:
        raise HeaderFieldError(field, f"{field}: the {what} is longer than {max_length}")
    if _CONTROL.search(text) is not None:
        raise HeaderFieldError(
            field, f"{field}: the {what} contains a control character: {_cut(text)!r}"
        )
    return text


def _cut(text: str, limit: int = 64) -> str:
    """`text` shortened for a remark: a hostile name must not make the answer huge."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
