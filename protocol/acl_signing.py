"""Request signatures of RocketMQ's ACL: what is signed, how, and the client's side of it.

The signed content is every extFields value except `Signature` (and the broker also leaves out
`_UNIQUE_KEY_QUERY`), ordered by key as Java's `TreeMap` orders strings (UTF-16 code units),
concatenated and UTF-8 encoded, followed by the body bytes unchanged
(`AclUtils.combineRequestContent` and `combineBytes`). The signature is
base64(HMAC-SHA1(secretKey, content)) (`AclSigner`). Java encodes an unpaired surrogate as
`?`; so does this module. Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from protocol.command import RemotingCommand

ACCESS_KEY: Final = "AccessKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
#: the channel field the C++ client adds (and signs) beside AccessKey
ONS_CHANNEL: Final = "OnsChannel"
#: upstream's `MixAll.UNIQUE_MSG_QUERY_FLAG`: left out of the content by the broker
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"
_BROKER_EXCLUDED: Final = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})
_CLIENT_EXCLUDED: Final = frozenset({SIGNATURE})


def _java_order(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare as Java compares Strings (code unit by code unit).
    return key.encode("utf-16-be", "surrogatepass")


def combine_request_content(
    ext_fields: Mapping[str, str],
    body: bytes | None,
    *,
    excluded: frozenset[str] = _BROKER_EXCLUDED,
) -> bytes:
    """The bytes a signature covers: sorted field values (UTF-8), then the body."""
    values = "".join(
        ext_fields[k] for k in sorted(ext_fields, key=_java_order) if k not in excluded
    )
    return values.encode("utf-8", "replace") + (body or b"")


def cal_signature(content: bytes, secret_key: str) -> str:
    """base64(HMAC-SHA1(secret_key, content)) as ASCII text."""
    digest = hmac.new(secret_key.encode("utf-8", "replace"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def request_signature(
    ext_fields: Mapping[str, str],
    body: bytes | None,
    secret_key: str,
    *,
    excluded: frozenset[str] = _BROKER_EXCLUDED,
) -> str:
    """`cal_signature(combine_request_content(...))` without copying the body."""
    mac = hmac.new(secret_key.encode("utf-8", "replace"), None, hashlib.sha1)
    mac.update(combine_request_content(ext_fields, None, excluded=excluded))
    if body:
        mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


def signature_matches(expected: str, given: str | None) -> bool:
    """Constant-time comparison; a missing or non-ASCII `given` simply does not match."""
    if given is None:
        return False
    # compare_digest refuses non-ASCII str: compare bytes instead.
    return hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """A client's access key and secret (the secret never appears in repr or logs)."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)
    #: sent as `OnsChannel` when set (what the C++ client calls the channel)
    channel: str | None = None


def sign_request(command: RemotingCommand, credentials: SessionCredentials) -> None:
    """Add AccessKey (and SecurityToken, OnsChannel) and the Signature to `command` in place.

    Like the Java client's `AclClientRPCHook`: every other extFields value is signed, so sign
    after the header is final and before the frame is encoded.
    """
    fields = command.ext_fields
    fields.pop(SIGNATURE, None)
    fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token is not None:
        fields[SECURITY_TOKEN] = credentials.security_token
    if credentials.channel is not None:
        fields[ONS_CHANNEL] = credentials.channel
    fields[SIGNATURE] = request_signature(
        fields, command.body, credentials.secret_key, excluded=_CLIENT_EXCLUDED
    )
