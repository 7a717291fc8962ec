"""The FUSE operations of the power-cut file system: a passthrough to a backing directory that
tells the journal (`tests.powercut.journal`) what each request changes before changing it.

Inodes are the backing files' inode numbers (the backing root is FUSE's root inode); file
handles are backing descriptors, always opened read/write so a page's pre-image can be read
before a write. Durability is modelled, not performed: fsync and fsyncdir only tell the journal
(or fail with EIO: fsync while `eio_files` is set, fsyncdir while `eio_dirs` is); the backing
file system is never synced.
"""

from __future__ import annotations

import errno
import os
import stat

import pyfuse3

from tests.powercut.journal import DirOp, Journal

TIMEOUT_S = 5.0


def _fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


class PowerCutOperations(pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False

    def __init__(self, root: str, journal: Journal) -> None:
        super().__init__()
        self.root = root
        self.journal = journal
        self.root_ino = os.lstat(root).st_ino
        self.paths: dict[int, str] = {pyfuse3.ROOT_INODE: root}
        self.handles: dict[int, int] = {}  # fh (backing fd) -> inode
        self.dir_handles: dict[int, int] = {}  # fh -> directory inode
        self._next_dir_fh = 1
        #: fsync (of files) and fsyncdir fail with EIO while these are set
        self.eio_files = False
        self.eio_dirs = False
        self.eio_count = 0

    # -- inodes and paths -----------------------------------------------------------------

    def _ino(self, st: os.stat_result) -> int:
        return pyfuse3.ROOT_INODE if st.st_ino == self.root_ino else st.st_ino

    def _path(self, inode: int) -> str:
        try:
            return self.paths[inode]
        except KeyError:
            raise _fail(errno.ENOENT) from None

    def _child(self, parent: int, name: bytes) -> str:
        return os.path.join(self._path(parent), os.fsdecode(name))

    def _attr(self, path: str) -> pyfuse3.EntryAttributes:
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise _fail(exc.errno or errno.EIO) from None
        ino = self._ino(st)
        self.paths[ino] = path
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = ino
        entry.generation = 0
        entry.entry_timeout = TIMEOUT_S
        entry.attr_timeout = TIMEOUT_S
        entry.st_mode = st.st_mode
        entry.st_nlink = st.st_nlink
        entry.st_uid = st.st_uid
        entry.st_gid = st.st_gid
        entry.st_rdev = st.st_rdev
        entry.st_size = st.st_size
        entry.st_blksize = 4096
        entry.st_blocks = st.st_blocks
        entry.st_atime_ns = st.st_atime_ns
        entry.st_mtime_ns = st.st_mtime_ns
        entry.st_ctime_ns = st.st_ctime_ns
        return entry

    @staticmethod
    def _lstat(path: str) -> os.stat_result | None:
        try:
            return os.lstat(path)
        except FileNotFoundError:
            return None

    def _check_eio(self, failing: bool) -> None:
        if failing:
            self.eio_count += 1
            raise _fail(errno.EIO)

    # -- lookups and attributes -----------------------------------------------------------

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self._path(parent_inode)
        if name == b".":
            return self._attr(parent)
        if name == b"..":
            return self._attr(parent if parent == self.root else os.path.dirname(parent))
        return self._attr(os.path.join(parent, os.fsdecode(name)))

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._attr(self._path(inode))

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        path = self._path(inode)
        try:
            if fields.update_size:
                fd = fh if fh is not None else os.open(path, os.O_RDWR)
                try:
                    self.journal.before_truncate(inode, fd, attr.st_size)
                    os.ftruncate(fd, attr.st_size)
                finally:
                    if fh is None:
                        os.close(fd)
            if fields.update_mode:
                os.chmod(path, stat.S_IMODE(attr.st_mode))
            if fields.update_atime or fields.update_mtime:
                st = os.lstat(path)
                atime = attr.st_atime_ns if fields.update_atime else st.st_atime_ns
                mtime = attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns
                os.utime(path, ns=(atime, mtime))
        except OSError as exc:
            raise _fail(exc.errno or errno.EIO) from None
        return self._attr(path)

    async def access(self, inode: int, mode: int, ctx: pyfuse3.RequestContext) -> bool:
        return True

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        st = os.statvfs(self.root)
        data = pyfuse3.StatvfsData()
        data.f_bsize = 4096
        data.f_frsize = st.f_frsize
        data.f_blocks = st.f_blocks
        data.f_bfree = st.f_bfree
        data.f_bavail = st.f_bavail
        data.f_files = st.f_files
        data.f_ffree = st.f_ffree
        data.f_favail = st.f_favail
        data.f_namemax = st.f_namemax
        return data

    # -- directory entries ----------------------------------------------------------------

    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        path = self._child(parent_inode, name)
        try:
            os.mkdir(path, mode)
        except OSError as exc:
            raise _fail(exc.errno or errno.EIO) from None
        entry = self._attr(path)
        self.journal.record(DirOp("mkdir", {parent_inode}, entry.st_ino, path))
        return entry

    async def create(
        self,
        parent_inode: int,
        name: bytes,
        mode: int,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        path = self._child(parent_inode, name)
        try:
            fd = os.open(path, self._flags(flags) | os.O_CREAT | os.O_EXCL, mode)
        except OSError as exc:
            raise _fail(exc.errno or errno.EIO) from None
        entry = self._attr(path)
        self.journal.record(DirOp("create", {parent_inode}, entry.st_ino, path))
        self.journal.created(entry.st_ino)
        self.handles[fd] = entry.st_ino
        return pyfuse3.FileInfo(fh=fd, keep_cache=True), entry

    def _remove(self, parent_inode: int, name: bytes, kind: str) -> None:
        path = self._child(parent_inode, name)
        try:
            st = os.lstat(path)
            if kind == "rmdir" and os.listdir(path):
                raise _fail(errno.ENOTEMPTY)
            trash = self.journal.trash_path(os.fsdecode(name))
            os.rename(path, trash)
        except OSError as exc:
            raise _fail(exc.errno or errno.EIO) from None
        self.paths[self._ino(st)] = trash
        self.journal.record(DirOp(kind, {parent_inode}, st.st_ino, path, trash=trash))

    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._remove(parent_inode, name, "unlink")

    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._remove(parent_inode, name, "rmdir")

    async def rename(  # noqa: PLR0917 (pyfuse3's signature)
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise _fail(errno.EINVAL)
        old = self._child(parent_inode_old, name_old)
        new = self._child(parent_inode_new, name_new)
        trash = ""
        try:
            st = os.lstat(old)
            replaced = self._lstat(new)
            if replaced is not None:
                if flags & pyfuse3.RENAME_NOREPLACE:
                    raise _fail(errno.EEXIST)
                trash = self.journal.trash_path(os.fsdecode(name_new))
                os.rename(new, trash)
                self.paths[self._ino(replaced)] = trash
            os.rename(old, new)
        except OSError as exc:
            raise _fail(exc.errno or errno.EIO) from None
        self.paths[self._ino(st)] = new
        dirs = {parent_inode_old, parent_inode_new}
        self.journal.record(DirOp("rename", dirs, st.st_ino, old, target=new, trash=trash))

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        self._path(inode)
        fh = self._next_dir_fh
        self._next_dir_fh += 1
        self.dir_handles[fh] = inode
        return fh

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        path = self._path(self.dir_handles[fh])
        names = sorted(os.listdir(path))
        for index in range(start_id, len(names)):
            try:
                entry = self._attr(os.path.join(path, names[index]))
            except pyfuse3.FUSEError:
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(names[index]), entry, index + 1):
                return

    async def releasedir(self, fh: int) -> None:
        self.dir_handles.pop(fh, None)

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        self._check_eio(self.eio_dirs)
        self.journal.dir_synced(self.dir_handles[fh])

    # -- file contents --------------------------------------------------------------------

    @staticmethod
    def _flags(flags: int) -> int:
        """Backing descriptors are read/write (pre-images are read before writes) and never
        O_APPEND (the kernel sends the offset of every write)."""
        flags &= ~(os.O_ACCMODE | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_TRUNC)
        return flags | os.O_RDWR | os.O_CLOEXEC

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        path = self._path(inode)
        try:
            fd = os.open(path, self._flags(flags))
            if flags & os.O_TRUNC:
                self.journal.before_truncate(inode, fd, 0)
                os.ftruncate(fd, 0)
        except OSError as exc:
            raise _fail(exc.errno or errno.EIO) from None
        self.handles[fd] = inode
        return pyfuse3.FileInfo(fh=fd, keep_cache=True)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        return os.pread(fh, size, off)

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self.journal.before_write(self.handles[fh], fh, off, len(buf))
        return os.pwrite(fh, buf, off)

    async def flush(self, fh: int) -> None:
        pass

    async def release(self, fh: int) -> None:
        self.handles.pop(fh, None)
        os.close(fh)

    async def fsync(self, fh: int, datasync: bool) -> None:
        self._check_eio(self.eio_files)
        self.journal.synced(self.handles[fh])
