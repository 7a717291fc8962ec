"""Custom headers of the name server's own requests, as RocketMQ 4.9 names their fields.

REGISTER_BROKER (103) and its response, UNREGISTER_BROKER (104), QUERY_DATA_VERSION (322) and
the KV config requests (100-102, 219); mirrors `common/protocol/header/namesrv/*.java`. The route
and topic-list headers the broker's embedded role already answers live in `consumer_headers`
and `admin_topic`. Names that key the name server's tables (cluster, broker name, broker
address) are held to `names.check_label`; a missing or malformed field is a `HeaderFieldError`
naming it (answered SYSTEM_ERROR, as upstream's `decodeCommandCustomHeader` failure is).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Final

from ._fields import INT32_MAX
from .consumer_headers import Long, _ExtFieldsHeader
from .errors import HeaderFieldError
from .names import check_label

#: the longest cluster name, broker name or broker address a name server keeps
NAMESRV_LABEL_MAX_LENGTH: Final = 255
#: `MixAll.MASTER_ID`: the broker id of a broker group's master
MASTER_ID: Final = 0
#: `NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG`: KV namespace whose list REGISTER_BROKER returns
NAMESPACE_ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequestHeader(_ExtFieldsHeader):
    """REGISTER_BROKER (103). `body_crc32` is `UtilAll.crc32` of the body (0: not checked)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Long
    compressed: bool = False
    body_crc32: int = 0

    def checked(self) -> RegisterBrokerRequestHeader:
        """Self, once the names that key the tables pass `check_label`; `HeaderFieldError`."""
        check_registration_labels(self.cluster_name, self.broker_name, self.broker_addr)
        if len(self.ha_server_addr) > NAMESRV_LABEL_MAX_LENGTH:
            raise HeaderFieldError(
                "haServerAddr",
                f"haServerAddr: the HA address is longer than {NAMESRV_LABEL_MAX_LENGTH}",
            )
        if self.broker_id < 0:
            raise HeaderFieldError("brokerId", f"brokerId: {self.broker_id} is negative")
        return self


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponseHeader(_ExtFieldsHeader):
    """A slave learns its master's address and HA address; both absent for a master."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(frozen=True, slots=True)
class UnRegisterBrokerRequestHeader(_ExtFieldsHeader):
    """UNREGISTER_BROKER (104)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@dataclass(frozen=True, slots=True)
class QueryDataVersionRequestHeader(_ExtFieldsHeader):
    """QUERY_DATA_VERSION (322): the body is the broker's `DataVersion` JSON."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@dataclass(frozen=True, slots=True)
class QueryDataVersionResponseHeader(_ExtFieldsHeader):
    changed: bool


@dataclass(frozen=True, slots=True)
class PutKVConfigRequestHeader(_ExtFieldsHeader):
    """PUT_KV_CONFIG (100)."""

    namespace: str
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class KVConfigRequestHeader(_ExtFieldsHeader):
    """GET_KV_CONFIG (101) and DELETE_KV_CONFIG (102): one key of a namespace."""

    namespace: str
    key: str


@dataclass(frozen=True, slots=True)
class GetKVConfigResponseHeader(_ExtFieldsHeader):
    value: str | None = None


@dataclass(frozen=True, slots=True)
class GetKVListByNamespaceRequestHeader(_ExtFieldsHeader):
    """GET_KVLIST_BY_NAMESPACE (219)."""

    namespace: str


def check_registration_labels(cluster: str, broker_name: str, broker_addr: str) -> None:
    """`HeaderFieldError` naming the first of the three that is blank, too long or holds a
    control character."""
    check_label("clusterName", cluster, "cluster name", NAMESRV_LABEL_MAX_LENGTH)
    check_label("brokerName", broker_name, "broker name", NAMESRV_LABEL_MAX_LENGTH)
    check_label("brokerAddr", broker_addr, "broker address", NAMESRV_LABEL_MAX_LENGTH)


def crc32_of(body: bytes | None) -> int:
    """`UtilAll.crc32`: CRC-32 of the body with the top bit cleared; 0 for no body."""
    return zlib.crc32(body) & INT32_MAX if body else 0
