"""`HAService`: which side of replication a broker runs, by `broker_role`.

A master (SYNC_MASTER or ASYNC_MASTER) listens for slaves on `ha_listen_port`, by default the
listen port + 1 as in 4.9 (any free port when the listen port is 0); a SLAVE runs the HA client
towards `ha_master_address`. The name-server registration, once it learns the master's HA
address, hands it to `update_master_address`; an explicit `ha_master_address` wins over it, as
4.9's `haMasterAddress` does.
"""

from __future__ import annotations

import structlog
import trio

from broker.config import BrokerConfig, ConfigError, HostPort
from broker.ha.master import serve_ha
from broker.ha.slave import HAClient
from store.config import BrokerRole
from store.message_store import DefaultMessageStore

log = structlog.get_logger()


class HAService:
    def __init__(self, config: BrokerConfig, store: DefaultMessageStore) -> None:
        self.config = config
        self.store = store
        #: the slave's client (None on a master)
        self.client: HAClient | None = None
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
        if self.is_slave:
            self.client = HAClient(self.store, self.config.ha_master_address)
            await nursery.start(self.client.run)
            if self.config.ha_master_address is None:
                log.warning("ha_master_address_unknown", waiting_for="registration")
            return
        host = self.config.listen.host
        self.ha_port = await nursery.start(serve_ha, self.store, host, self.listen_port())

    def update_master_address(self, address: str) -> None:
        """The registration's answer named the master's HA address (`HOST:PORT`, "" for none).
        Ignored on a master and when `ha_master_address` is configured; a bad address is one
        log event and changes nothing."""
        if self.client is None or self.config.ha_master_address is not None:
            return
        if not address:
            self.client.update_master_address(None)
            return
        try:
            master = HostPort.parse("ha_master_address", address)
        except ConfigError as exc:
            log.error("ha_master_address_refused", address=address, error=str(exc))
            return
        self.client.update_master_address(master)
