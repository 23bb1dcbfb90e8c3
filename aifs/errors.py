"""The one error type the namespace and data layers raise: an errno a POSIX caller understands."""

import errno as errno_codes
import os


class FsError(Exception):
    """A POSIX error; the FUSE layer turns it into the reply's errno unchanged."""

    def __init__(self, errno: int, detail: str = "") -> None:
        super().__init__(errno, detail or os.strerror(errno))
        self.errno = errno

    def __str__(self) -> str:
        return f"[{errno_codes.errorcode.get(self.errno, self.errno)}] {self.args[1]}"
