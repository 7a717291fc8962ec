"""`HAService`: which side of replication a broker runs, by `broker_role`.

A master (SYNC_MASTER or ASYNC_MASTER) listens for slaves on `ha_listen_port`, by default the
listen port + 1 as in 4.9 (any free port when the listen port is 0). A SLAVE runs the HA client
towards `ha_master_address` and copies the master's topics, groups and offsets every 10 s from
`ha_master_broker_address`. The name-server registration hands what its answer names to
`update_master_addresses`; an explicit address wins over it, as 4.9's `haMasterAddress` does.

`suggest_broker_id` is which broker of the group a pull's answer tells the consumer to read from
next (4.9's `suggestWhichBrokerId`). Without `slave_read_enable` always the master. With it, a
consumer whose last pulled message lies more than `access_message_in_memory_max_ratio` % of the
machine's memory behind the end of the commit log (its reads hit the disk, not the page cache)
is sent to the group's `which_broker_when_consume_slowly` (a slave, 1 by default); any other to
the group's `broker_id`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

import structlog
import trio

from broker.config import ConfigError, HostPort
from broker.ha.master import serve_ha
from broker.ha.slave import HAClient
from broker.ha.slave_sync import SlaveSynchronize
from broker.resources import bind_error
from store.config import BrokerRole
from store.get_message import GetMessageResult
from store.message_store import DefaultMessageStore

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.schedule import ScheduleMessageService

log = structlog.get_logger()

#: how a bind failure names the HA port when `ha_listen_port` is not set
_DEFAULT_PORT_KEY: Final = "ha_listen_port (unset: the listen port + 1)"


class HAService:
    def __init__(
        self,
        broker: BrokerContext,
        store: DefaultMessageStore,
        schedule: ScheduleMessageService | None = None,
    ) -> None:
        self.broker = broker
        self.schedule = schedule
        self.config = broker.config
        self.store = store
        #: the slave's client and metadata copier (None on a master)
        self.client: HAClient | None = None
        self.sync: SlaveSynchronize | None = None
        #: the master's bound HA port (None on a slave)
        self.ha_port: int | None = None

    @property
    def is_slave(self) -> bool:
        return self.config.store.broker_role is BrokerRole.SLAVE

    def listen_port(self) -> int:
        """The HA port to bind: `ha_listen_port`, else the listen port + 1 (0 stays 0)."""
        if self.config.ha_listen_port is not None:
            return self.config.ha_listen_port
        port = self.config.listen.port
        return port + 1 if port else 0

    async def start(self, nursery: trio.Nursery) -> None:
        """Start this role's side in `nursery`. Raises OSError when a master's HA port cannot
        be bound."""
        config = self.config
        if self.is_slave:
            self.client = HAClient(self.store, config.ha_master_address)
            await nursery.start(self.client.run)
            self.sync = SlaveSynchronize(
                self.broker, config.ha_master_broker_address, self.schedule
            )
            await nursery.start(self.sync.run)
            if config.ha_master_address is None:
                log.warning("ha_master_address_unknown", waiting_for="registration")
            return
        port = self.listen_port()
        try:
            self.ha_port = await nursery.start(serve_ha, self.store, config.listen.host, port)
        except OSError as exc:
            key = "ha_listen_port" if config.ha_listen_port is not None else _DEFAULT_PORT_KEY
            raise bind_error(key, HostPort(config.listen.host, port), exc) from None

    def update_master_addresses(self, ha_server_addr: str, master_addr: str) -> None:
        """The registration's answer named the master's HA address and broker address
        (`HOST:PORT` each, "" for none: 4.9's `haServerAddr` and `masterAddr`). Ignored on a
        master and for an address that is configured; a bad address is one log event and
        changes nothing."""
        if self.client is not None and self.config.ha_master_address is None:
            ok, ha = _parse("haServerAddr", ha_server_addr)
            if ok:
                self.client.update_master_address(ha)
        if self.sync is not None and self.config.ha_master_broker_address is None:
            ok, broker = _parse("masterAddr", master_addr)
            if ok:
                self.sync.update_master_address(broker)


def _parse(key: str, address: str) -> tuple[bool, HostPort | None]:
    """(True, the address or None for ""), or (False, None), logged, when it is no
    `HOST:PORT`."""
    if not address:
        return True, None
    try:
        return True, HostPort.parse(key, address)
    except ConfigError as exc:
        log.error("ha_master_address_refused", key=key, address=address, error=str(exc))
        return False, None


MASTER_ID: Final = 0


def total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30  # no sysconf: a guess, used only to advise consumers


TOTAL_PHYSICAL_MEMORY: Final = total_physical_memory()


def suggest_broker_id(broker: BrokerContext, group_name: str, found: GetMessageResult) -> int:
    if not broker.config.slave_read_enable:
        return MASTER_ID
    group = broker.groups.find(group_name)
    if group is None:
        return MASTER_ID
    if consume_slowly(broker, found):
        return group.which_broker_when_consume_slowly
    return group.broker_id


def consume_slowly(broker: BrokerContext, found: GetMessageResult) -> bool:
    """The records pulled lie further behind the log's end than memory holds (4.9's rule)."""
    if found.max_physical_offset_pulling < 0 or broker.consume is None:
        return False
    ratio = broker.config.store.access_message_in_memory_max_ratio
    behind = broker.consume.files.max_offset - found.max_physical_offset_pulling
    return behind > TOTAL_PHYSICAL_MEMORY * ratio // 100
