"""`KVConfigManager`: the name server's namespace -> key -> value table, kept in a JSON file.

Mirrors 4.9's `namesrv/kvconfig/KVConfigManager.java` and its file, `KVConfigSerializeWrapper`:

    {"configTable":{"<namespace>":{"<key>":"<value>",...},...}}

at `kv_config_path` (4.9's default `~/namesrv/kvConfig.json`). Unlike 4.9, a change is made
durable before it is answered, and a change the disk refuses is not kept in memory either:
the new table is written to `<path>.tmp`, fsynced and renamed over the file (then the directory
fsynced), the previous file copied to `<path>.bak` first as 4.9 does, and only then swapped in.
Writers take turns (a lock), so the file always holds the latest answered table. A file that
cannot be read or parsed at startup stops the name server (`KVConfigError`), naming the file:
starting empty would silently drop a user's configuration at the next write.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Final

import structlog
import trio

from protocol.admin_topic import KVTable

log = structlog.get_logger()

_TMP_SUFFIX: Final = ".tmp"
_BAK_SUFFIX: Final = ".bak"

ConfigTable = dict[str, dict[str, str]]


class KVConfigError(Exception):
    """The KV config file cannot be loaded; the message names it and says why."""


class KVConfigFullError(Exception):
    """A put past `max_kv_entries`."""


class KVConfigManager:
    def __init__(self, path: str | os.PathLike[str], *, max_entries: int) -> None:
        self.path = Path(path)
        self.max_entries = max_entries
        self.config_table: ConfigTable = {}
        self._lock = trio.Lock()

    @property
    def entries(self) -> int:
        return sum(len(table) for table in self.config_table.values())

    def load(self) -> None:
        """Read the file if it exists. Raises `KVConfigError` for one that cannot be used."""
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            log.info("kv_config_absent", file=str(self.path))
            return
        except OSError as exc:
            raise KVConfigError(f"{self.path}: cannot be read: {exc.strerror or exc}") from None
        self.config_table = _parse(text, self.path)
        log.info("kv_config_loaded", file=str(self.path), entries=self.entries)

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        return self.config_table.get(namespace, {}).get(key)

    def get_kv_list_by_namespace(self, namespace: str) -> bytes | None:
        """`KVTable` JSON of the namespace; None when it has no entry."""
        table = self.config_table.get(namespace)
        return None if table is None else KVTable(dict(table)).to_json()

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """Store and persist. Raises `KVConfigFullError` past `max_entries`, OSError when the
        file cannot be written (the table is then unchanged)."""
        async with self._lock:
            current = self.config_table.get(namespace, {})
            if key not in current and self.entries >= self.max_entries:
                full = f"the KV config holds {self.entries} entries (max_kv_entries)"
                raise KVConfigFullError(full)
            table = {**self.config_table, namespace: {**current, key: value}}
            await self._persist(table)
            log.info("kv_config_put", namespace=namespace, key=key, updated=key in current)

    async def delete_kv_config(self, namespace: str, key: str) -> bool:
        """Remove and persist; False when there was no such entry (nothing is written).
        Raises OSError when the file cannot be written (the table is then unchanged)."""
        async with self._lock:
            current = self.config_table.get(namespace)
            if current is None or key not in current:
                return False
            remaining = {k: v for k, v in current.items() if k != key}
            table = {ns: t for ns, t in self.config_table.items() if ns != namespace}
            if remaining:
                table[namespace] = remaining
            await self._persist(table)
            log.info("kv_config_deleted", namespace=namespace, key=key)
            return True

    async def _persist(self, table: ConfigTable) -> None:
        data = json.dumps({"configTable": table}, ensure_ascii=False, sort_keys=True).encode()
        try:
            await trio.to_thread.run_sync(_write_atomically, self.path, data)
        except OSError as exc:
            log.error("kv_config_write_failed", file=str(self.path), error=str(exc))
            raise
        self.config_table = table


def _parse(text: bytes, path: Path) -> ConfigTable:
    try:
        obj = json.loads(text.decode() or "{}")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise KVConfigError(f"{path}: not a KV config JSON file: {exc}") from None
    table = obj.get("configTable") if isinstance(obj, dict) else None
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise KVConfigError(f"{path}: configTable is not an object")
    result: ConfigTable = {}
    for namespace, entries in table.items():
        if entries is None:
            continue
        if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
            raise KVConfigError(f"{path}: namespace {namespace!r} is not a table of strings")
        result[namespace] = dict(entries)
    return result


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `<path>.tmp`, fsync, keep the old file as `<path>.bak`, rename over `path`,
    fsync the directory: `path` holds the old table or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + _TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if path.exists():
        shutil.copyfile(path, path.with_name(path.name + _BAK_SUFFIX))
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
