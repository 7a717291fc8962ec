"""Address allow-lists of the plain ACL (`whiteRemoteAddress`, `globalWhiteRemoteAddresses`).

The pattern forms of RocketMQ 4.9's `RemoteAddressStrategyFactory`:

| pattern | matches |
|---|---|
| blank | nothing |
| `*`, `*.*.*.*`, `*:*:*:*:*:*:*:*` | every address |
| `192.168.1.{1,2,3}` (also IPv6 `...:{a,b}`) | the listed last parts |
| `10.0.0.1,10.0.0.2` | the listed addresses |
| `192.168.*.*`, `192.168.1.10-20`, `2001:db8::1-ff` | a prefix, then one range or `*` part |
| `10.0.0.1`, `::1` | that address |

As upstream, parts after the first range or `*` part are not compared. Addresses are compared
as `ipaddress` objects, so `::1` and `0:0::1` are the same. A bad pattern raises
`AddressPatternError`; matching never raises.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final

_ANY_PATTERNS: Final = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressPatternError(ValueError):
    """An allow-list pattern that is not one of the supported forms."""


@dataclass(frozen=True, slots=True)
class AddressMatcher:
    """One pattern: `match_all`, a set of exact addresses, or prefix parts plus one range."""

    text: str
    match_all: bool = False
    addresses: frozenset[IPAddress] = frozenset()
    #: for ranges: 4 (IPv4) or 8 (IPv6) parts; the prefix parts to equal, then the range
    parts: int = 0
    prefix: tuple[int, ...] = ()
    low: int = 0
    high: int = -1

    def match(self, ip: str) -> bool:
        if self.match_all:
            return True
        address = _address(ip)
        if address is None:
            return False
        if self.addresses:
            return address in self.addresses
        if self.high < 0:
            return False
        values = _parts(address)
        if len(values) != self.parts:
            return False
        index = len(self.prefix)
        return values[:index] == self.prefix and self.low <= values[index] <= self.high


NOTHING: Final = AddressMatcher("")
EVERYTHING: Final = AddressMatcher("*", match_all=True)


def parse_address_pattern(text: str | None) -> AddressMatcher:
    """The matcher for one pattern; `AddressPatternError` when it is malformed."""
    pattern = (text or "").strip()
    if not pattern:
        return NOTHING
    if pattern in _ANY_PATTERNS:
        return EVERYTHING
    if pattern.endswith("}"):
        return _braces(pattern)
    if "," in pattern:
        return _exact(pattern, [p.strip() for p in pattern.split(",") if p.strip()])
    if "*" in pattern or "-" in pattern:
        return _range(pattern)
    return _exact(pattern, [pattern])


def _address(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _parts(address: IPAddress) -> tuple[int, ...]:
    if isinstance(address, ipaddress.IPv4Address):
        return tuple(address.packed)
    packed = address.packed
    return tuple(int.from_bytes(packed[i : i + 2], "big") for i in range(0, 16, 2))


def _exact(pattern: str, items: list[str]) -> AddressMatcher:
    addresses = set()
    for item in items:
        address = _address(item)
        if address is None:
            raise AddressPatternError(f"not an IP address: {item!r} in {pattern!r}")
        addresses.add(address)
    if not addresses:
        raise AddressPatternError(f"no address in {pattern!r}")
    return AddressMatcher(pattern, addresses=frozenset(addresses))


def _braces(pattern: str) -> AddressMatcher:
    separator = ":" if ":" in pattern else "."
    head, brace, tail = pattern.rpartition(separator + "{")
    if not brace:
        raise AddressPatternError(f"expected {separator}{{...}} at the end of {pattern!r}")
    items = [head + separator + part.strip() for part in tail[:-1].split(",") if part.strip()]
    return _exact(pattern, items)


def _range(pattern: str) -> AddressMatcher:
    v6 = ":" in pattern
    parts = 8 if v6 else 4
    base, maximum = (16, 0xFFFF) if v6 else (10, 255)
    texts = _split_v6(pattern) if v6 else pattern.split(".")
    if len(texts) != parts:
        raise AddressPatternError(f"expected {parts} parts in {pattern!r}")
    prefix: list[int] = []
    for raw in texts:
        text = raw.strip()
        if text == "*" or "-" in text:
            low, high = (0, maximum) if text == "*" else _bounds(text, base, pattern)
            if not 0 <= low <= high <= maximum:
                raise AddressPatternError(f"range {text!r} is out of bounds in {pattern!r}")
            return AddressMatcher(pattern, parts=parts, prefix=tuple(prefix), low=low, high=high)
        prefix.append(_number(text, base, maximum, pattern))
    raise AddressPatternError(f"no range or * part in {pattern!r}")


def _split_v6(pattern: str) -> list[str]:
    """Eight parts, `::` expanded to the missing zero parts."""
    if "::" in pattern:
        head, _, tail = pattern.partition("::")
        left = head.split(":") if head else []
        right = tail.split(":") if tail else []
        return left + ["0"] * (8 - len(left) - len(right)) + right
    return pattern.split(":")


def _bounds(text: str, base: int, pattern: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return _number(low, base, None, pattern), _number(high, base, None, pattern)


def _number(text: str, base: int, maximum: int | None, pattern: str) -> int:
    try:
        value = int(text.strip(), base)
    except ValueError:
        raise AddressPatternError(f"bad part {text!r} in {pattern!r}") from None
    if value < 0 or (maximum is not None and value > maximum):
        raise AddressPatternError(f"part {text!r} is out of bounds in {pattern!r}")
    return value
