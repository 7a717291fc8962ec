"""TLS on the broker's listeners, in RocketMQ's three modes, and the client's TLS context.

`tls_mode` follows RocketMQ's `TlsMode`: `disabled` (plaintext only; the stream is not touched),
`permissive` (TLS and plaintext on the same port, told apart by the first byte: 0x16 opens a
TLS handshake record, as in upstream's `HandshakeHandler`), `enforcing` (TLS only: a plaintext
peer is disconnected). The server certificate and key come from the configuration, with an
optional CA bundle for client certificates: `tls_server_need_client_auth` = none, optional or
require, as `tls.server.need.client.auth` (mutual TLS with `require`).

`TlsAcceptor.negotiate` turns an accepted stream into the one the connection should use, or
raises `TlsHandshakeError`; it never lets a peer's bytes raise anything else. Contexts are built
once per set of settings and rebuilt when a certificate or key file changes on disk.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import structlog
import trio

if TYPE_CHECKING:
    from broker.config import BrokerConfig

#: first byte of a TLS record carrying a handshake
HANDSHAKE_RECORD: Final = 0x16
PEEK_SIZE: Final = 64 * 1024
HANDSHAKE_TIMEOUT_S: Final = 10.0

log = structlog.get_logger()


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class TlsClientAuth(enum.Enum):
    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


_VERIFY_MODE: Final = {
    TlsClientAuth.NONE: ssl.CERT_NONE,
    TlsClientAuth.OPTIONAL: ssl.CERT_OPTIONAL,
    TlsClientAuth.REQUIRE: ssl.CERT_REQUIRED,
}


class TlsHandshakeError(Exception):
    """The peer did not get a usable stream; `reason` says why (a snake_case word)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TlsServerSettings:
    mode: TlsMode
    cert: str
    key: str
    ca: str | None = None
    client_auth: TlsClientAuth = TlsClientAuth.NONE
    key_password: str | None = field(default=None, repr=False)
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    #: protocols offered by ALPN ("h2" on the gRPC port); none on the remoting port
    alpn: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TlsServerSettings:
        return cls(
            config.tls_mode,
            config.tls_server_cert or "",
            config.tls_server_key or "",
            config.tls_server_ca,
            config.tls_server_need_client_auth,
            config.tls_server_key_password,
            # A handshake is a kind of idle wait: never longer than the idle timeout.
            min(HANDSHAKE_TIMEOUT_S, config.idle_timeout_s),
        )


def server_ssl_context(settings: TlsServerSettings) -> ssl.SSLContext:
    """A server context (TLS 1.2+); `ssl.SSLError` or `OSError` for unusable files."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.cert, settings.key, password=settings.key_password)
    context.verify_mode = _VERIFY_MODE[settings.client_auth]
    if settings.ca:
        context.load_verify_locations(cafile=settings.ca)
    elif settings.client_auth is not TlsClientAuth.NONE:
        raise ValueError("checking client certificates needs tls_server_ca")
    if settings.alpn:
        context.set_alpn_protocols(list(settings.alpn))
    return context


def client_ssl_context(
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    *,
    verify: bool = True,
) -> ssl.SSLContext:
    """A client context: trust `ca` (else the system store), present `cert`/`key` if given.

    `verify=False` skips the server's certificate check, as upstream's `tls.client.authServer`
    default; only for tests and trusted networks.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert:
        context.load_cert_chain(cert, key)
    return context


class PrefixedStream(trio.abc.Stream):
    """A stream whose first bytes were already read: they are returned again first."""

    def __init__(self, prefix: bytes, inner: trio.abc.Stream) -> None:
        self._prefix = prefix
        self.inner = inner

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            await trio.lowlevel.checkpoint()
            return data
        return await self.inner.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


class TlsAcceptor:
    """The server side of TLS for one set of settings."""

    def __init__(self, settings: TlsServerSettings) -> None:
        self.settings = settings
        self.context = server_ssl_context(settings)
        self._files_version = _files_version(settings)

    async def negotiate(self, stream: trio.abc.Stream) -> trio.abc.Stream:
        """The stream to speak the protocol on: TLS, or plaintext where the mode allows.

        Raises `TlsHandshakeError` for plaintext in enforcing mode, a failed or slow handshake, or a
        peer that closed first. Cancellation propagates.
        """
        if self.settings.mode is TlsMode.DISABLED:
            return stream
        with trio.move_on_after(self.settings.handshake_timeout_s) as waited:
            try:
                first = await stream.receive_some(PEEK_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise TlsHandshakeError("peer_reset", type(exc).__name__) from None
        if waited.cancelled_caught:
            raise TlsHandshakeError("handshake_timeout")
        if not first:
            raise TlsHandshakeError("peer_closed")
        transport = PrefixedStream(bytes(first), stream)
        if first[0] != HANDSHAKE_RECORD:
            if self.settings.mode is TlsMode.ENFORCING:
                raise TlsHandshakeError("plaintext_refused")
            return transport
        return await self._handshake(transport)

    async def _handshake(self, transport: trio.abc.Stream) -> trio.SSLStream[trio.abc.Stream]:
        tls = trio.SSLStream(transport, self.context, server_side=True)
        try:
            with trio.fail_after(self.settings.handshake_timeout_s):
                await tls.do_handshake()
        except trio.TooSlowError:
            raise TlsHandshakeError("handshake_timeout") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            cause = exc.__cause__
            detail = getattr(cause, "reason", None) or type(cause or exc).__name__
            raise TlsHandshakeError("handshake_failed", str(detail)) from None
        return tls

    def is_stale(self) -> bool:
        return _files_version(self.settings) != self._files_version


def _files_version(settings: TlsServerSettings) -> tuple[tuple[int, int], ...]:
    versions = []
    for path in (settings.cert, settings.key, settings.ca):
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        versions.append((st.st_mtime_ns, st.st_size) if st is not None else (0, 0))
    return tuple(versions)


_SHARED: dict[TlsServerSettings, TlsAcceptor] = {}


def shared_acceptor(config: BrokerConfig, alpn: tuple[str, ...] = ()) -> TlsAcceptor | None:
    """The acceptor for the configuration's TLS settings (offering `alpn`); None when TLS is
    disabled.

    Built on first use and again when a certificate, key or CA file changed (rotation without a
    restart; if the new files do not load, the old context stays and the failure is logged).
    Raises `ssl.SSLError`, `OSError` or `ValueError` when the files are unusable at first use.
    """
    if config.tls_mode is TlsMode.DISABLED:
        return None
    settings = TlsServerSettings.from_config(config)
    if alpn:
        settings = dataclasses.replace(settings, alpn=alpn)
    acceptor = _SHARED.get(settings)
    if acceptor is None:
        acceptor = _SHARED[settings] = TlsAcceptor(settings)
    elif acceptor.is_stale():
        try:
            acceptor = _SHARED[settings] = TlsAcceptor(settings)
        except (ssl.SSLError, OSError, ValueError) as exc:
            # A rotation caught half-written: keep serving with the files loaded before.
            acceptor._files_version = _files_version(settings)
            log.error("tls_reload_failed", cert=settings.cert, error=str(exc))
    return acceptor


async def start_tls(
    stream: trio.abc.Stream, config: BrokerConfig, alpn: tuple[str, ...] = ()
) -> trio.abc.Stream:
    """The connection's side of TLS: `stream` as `tls_mode` wants it, or `TlsHandshakeError`;
    `alpn` names the protocols the handshake offers.

    Logs why a peer was turned away (`tls_refused`) or why TLS could not start at all
    (`tls_unavailable`: unusable certificate files).
    """
    try:
        acceptor = shared_acceptor(config, alpn)
    except (ssl.SSLError, OSError, ValueError) as exc:
        log.error("tls_unavailable", cert=config.tls_server_cert, error=str(exc))
        raise TlsHandshakeError("tls_unavailable") from None
    if acceptor is None:
        return stream
    try:
        return await acceptor.negotiate(stream)
    except TlsHandshakeError as exc:
        log.info("tls_refused", reason=exc.reason, error=str(exc))
        raise


def check_security_files(config: BrokerConfig) -> None:
    """Load the ACL file and the TLS certificates now, so that a broker configured with
    unusable ones refuses to start instead of refusing every connection later.

    Raises `ConfigError` naming the key and the problem.
    """
    from broker.acl.validator import shared_validator
    from broker.config import ConfigError

    if config.acl_enable:
        validator = shared_validator(config.acl_file)
        if validator.version is None:
            # one line: a YAML error spans several
            raise ConfigError("acl_file", " ".join((validator.error or "cannot be loaded").split()))
    try:
        shared_acceptor(config)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(
            "tls_server_cert", f"the certificate or key cannot be used: {exc}"
        ) from None
