"""The mount's logging: lines a person can grep, in a log file that rotates by size.

Every line reads `TIME LEVEL COMPONENT: MESSAGE`, the component being the logger's name
(aifs.fuse.mount, aifs.tiers.s3, ...). The log file is rotated once it would grow past
`[logging] max_size`, keeping `[logging] keep` old files (FILE.1 the newest); a max_size
of 0 leaves rotation to an outside tool such as logrotate (copytruncate).

A background mount also writes to the log file through its stderr: what does not go
through logging (a traceback, a message of a C library) lands there too. After each
rotation its stdout and stderr are pointed at the new file, so nothing keeps growing
the rotated one.
"""

import logging
import os
import sys
from logging.handlers import RotatingFileHandler

from aifs.config import Config

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogFile(RotatingFileHandler):
    """The mount's log file; with `carries_stdio`, stdout and stderr follow it across rotations."""

    def __init__(self, config: Config, carries_stdio: bool = False) -> None:
        path = config.log_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, maxBytes=config.logging.max_size, backupCount=config.logging.keep)
        self.carries_stdio = carries_stdio

    def doRollover(self) -> None:  # noqa: N802 - the name logging calls
        super().doRollover()
        if self.carries_stdio and self.stream is not None:
            for stdio in (sys.stdout, sys.stderr):
                stdio.flush()
                os.dup2(self.stream.fileno(), stdio.fileno())


def setup_logging(config: Config, background: bool) -> None:
    """Log to the log file at `[logging] level`; a foreground mount also to stderr, while a
    background one's stderr is the log file itself (see the module docstring)."""
    handlers: list[logging.Handler] = [LogFile(config, carries_stdio=background)]
    if not background:
        handlers.append(logging.StreamHandler())
    logging.basicConfig(level=config.logging.level.upper(), handlers=handlers, format=LOG_FORMAT)
