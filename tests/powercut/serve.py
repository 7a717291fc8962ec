"""One boot of the power-cut file system: mount, serve until told to cut or to unmount, exit.

    python -m tests.powercut.serve BACKING MOUNTPOINT CONTROL_SOCKET

The control socket takes one line per connection and answers one line of JSON:
  `eio FILES DIRS`           fsync of files / of directories fails with EIO (1) or works (0)
  `stats`                    what the journal holds now
  `cut SEED KEEP TEAR`       unmount (the kernel hands over what it still holds dirty), undo
                             everything no fsync covered (`Journal.power_cut`), answer, exit
  `unmount`                  unmount and keep everything (a clean shutdown), answer, exit
Unmounting fails with EBUSY while a process still uses the mount; the answer then says so and
the file system keeps serving. The next boot starts a new process on the same backing directory.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pyfuse3
import structlog
import trio

from tests.powercut.fs import PowerCutOperations
from tests.powercut.journal import Journal, Odds

log = structlog.get_logger()

OPTIONS = {"fsname=powercut", "subtype=powercut"}


class Server:
    def __init__(self, backing: str, mountpoint: str, control: str) -> None:
        self.backing = os.path.abspath(backing)
        self.mountpoint = os.path.abspath(mountpoint)
        self.control = control
        self.journal = Journal(self.backing, self.backing.rstrip("/") + ".trash")
        self.ops = PowerCutOperations(self.backing, self.journal)
        self.unmounted = trio.Event()

    async def run(self) -> None:
        pyfuse3.init(self.ops, self.mountpoint, OPTIONS)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._fuse)
                listener = trio.SocketListener(await self._listen())
                log.info("powercut_mounted", mountpoint=self.mountpoint, backing=self.backing)
                while True:
                    stream = await listener.accept()
                    async with stream:
                        done = await self._serve(stream)
                    if done:
                        nursery.cancel_scope.cancel()
                        return
        finally:
            if not self.unmounted.is_set():
                pyfuse3.close(unmount=True)

    async def _fuse(self) -> None:
        await pyfuse3.main()
        self.unmounted.set()

    async def _listen(self) -> trio.socket.SocketType:
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(self.control)
        sock.listen(4)
        return sock

    async def _serve(self, stream: trio.SocketStream) -> bool:
        """Answer one request; True when the file system is unmounted and the process ends."""
        line = b""
        while not line.endswith(b"\n"):
            chunk = await stream.receive_some(4096)
            if not chunk:
                return False
            line += chunk
        words = line.decode().split()
        done = False
        reply: dict[str, object]
        if len(words) == 3 and words[0] == "eio":
            self.ops.eio_files, self.ops.eio_dirs = words[1] == "1", words[2] == "1"
            reply = {"ok": True, "eio_count": self.ops.eio_count}
        elif words == ["stats"]:
            reply = {"ok": True, "files": len(self.journal.files), "ops": len(self.journal.ops)}
        elif words and words[0] in ("cut", "unmount"):
            reply = await self._unmount()
            if reply["ok"]:
                done = True
                if words[0] == "cut":
                    seed, keep, tear = int(words[1]), float(words[2]), float(words[3])
                    stats = self.journal.power_cut(Odds(random.Random(seed), keep, tear))
                    reply.update(stats.as_dict())
                    log.info("powercut_cut", **stats.as_dict())
                else:
                    self.journal.settle()
        else:
            reply = {"ok": False, "error": f"unknown request {words!r}"}
        await stream.send_all(json.dumps(reply).encode() + b"\n")
        return done

    async def _unmount(self) -> dict[str, object]:
        result = await trio.run_process(
            ["fusermount3", "-u", self.mountpoint], capture_stderr=True, check=False
        )
        if result.returncode != 0:
            return {"ok": False, "error": result.stderr.decode().strip()}
        with trio.fail_after(30):
            await self.unmounted.wait()
        pyfuse3.close(unmount=False)
        return {"ok": True}


def main() -> None:
    backing, mountpoint, control = sys.argv[1:4]
    server = Server(backing, mountpoint, control)
    try:
        trio.run(server.run)
    except KeyboardInterrupt:
        subprocess.run(["fusermount3", "-u", "-z", server.mountpoint], check=False)


if __name__ == "__main__":
    main()
