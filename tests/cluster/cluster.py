"""A cluster of real processes on loopback: standalone name servers and brokers registered
with all of them (`namesrv_addr`), each broker a `rmq-broker serve` with its own store.

The name servers expire a silent broker after `EXPIRY_S` (scanned every `SCAN_S`), and the
brokers register every `PERIOD_MS`, so that losses and returns show in seconds.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable

import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.route import ClusterInfo, TopicRouteData
from tests.daemon import Daemon
from tests.namesrv.fake_broker import connect, request, route_request
from tests.namesrv.process import NamesrvProcess

EXPIRY_S = "4"
SCAN_S = "0.5"
PERIOD_MS = "1000"
BROKER_NAMES = ("broker-a", "broker-b", "broker-c")


class Cluster:
    """`namesrvs` in start order; `brokers` by broker name."""

    def __init__(self, root: pathlib.Path, namesrvs: int = 2) -> None:
        self.root = root
        self.namesrvs: list[NamesrvProcess] = []
        self.brokers: dict[str, Daemon] = {}
        for index in range(namesrvs):
            kv = root / f"namesrv-{index}" / "kvConfig.json"
            extra = ("--broker-expired-s", EXPIRY_S, "--scan-interval-s", SCAN_S)
            self.namesrvs.append(NamesrvProcess(kv, *extra))
        self.namesrv_addr = ";".join(n.addr for n in self.namesrvs)

    def start_brokers(self, names: tuple[str, ...] = BROKER_NAMES) -> None:
        """Start `names` side by side; return once each one listens."""
        started = [self.start_broker(name, wait=False) for name in names]
        for daemon in started:
            daemon.port = int(str(daemon.wait_for("listening")["port"]))

    def start_broker(self, name: str, *, wait: bool = True) -> Daemon:
        daemon = Daemon(
            self.root / name,
            env={
                "RMQ_NAMESRV_ADDR": self.namesrv_addr,
                "RMQ_BROKER_NAME": name,
                "RMQ_REGISTER_NAME_SERVER_PERIOD": PERIOD_MS,
            },
            wait=wait,
        )
        self.brokers[name] = daemon
        return daemon

    def broker_addr(self, name: str) -> str:
        return f"127.0.0.1:{self.brokers[name].port}"

    def route(self, namesrv: int, topic: str) -> TopicRouteData | None:
        """The route `namesrvs[namesrv]` answers for `topic`; None for TOPIC_NOT_EXIST."""
        answer = trio.run(_call, self.namesrvs[namesrv].port, route_request(topic))
        if answer.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return TopicRouteData.from_json(answer.body or b"{}")

    def cluster_info(self, namesrv: int) -> ClusterInfo:
        answer = trio.run(
            _call, self.namesrvs[namesrv].port, request(RequestCode.GET_BROKER_CLUSTER_INFO)
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return ClusterInfo.from_json(answer.body or b"{}")

    def wait_route(
        self,
        topic: str,
        wanted: Callable[[TopicRouteData | None], bool],
        namesrvs: tuple[int, ...] = (0, 1),
        timeout_s: float = 30,
    ) -> list[TopicRouteData | None]:
        """Poll the name servers until each route of `topic` passes `wanted`; the routes."""
        deadline = time.monotonic() + timeout_s
        while True:
            routes = [self.route(index, topic) for index in namesrvs]
            if all(wanted(route) for route in routes):
                return routes
            assert time.monotonic() < deadline, f"routes of {topic} never as wanted: {routes}"
            time.sleep(0.2)

    def stop(self) -> dict[str, int]:
        """SIGTERM to every live process; their exit codes by name."""
        codes = {}
        for name, daemon in self.brokers.items():
            if daemon.process.poll() is None:
                codes[name] = daemon.stop()
        for index, namesrv in enumerate(self.namesrvs):
            if namesrv.process.poll() is None:
                codes[f"namesrv-{index}"] = namesrv.stop()
        return codes


def broker_names(route: TopicRouteData | None) -> set[str]:
    return set() if route is None else {q.broker_name for q in route.queue_datas}


async def _call(port: int, command: RemotingCommand) -> RemotingCommand:
    async with connect(port) as conn:
        return await conn.call(command)
