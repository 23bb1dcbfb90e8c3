"""Errno mapping, in one place: every handler's exceptions become a FUSE reply errno."""

import errno
import functools
import inspect
import logging

import pyfuse3

from aifs.errors import FsError
from aifs.meta.writestate import MetaWriteFailed

log = logging.getLogger(__name__)


def _translate(handler):
    @functools.wraps(handler)
    async def wrapper(*args, **kwargs):
        try:
            return await handler(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except FsError as e:
            if e.errno == errno.EIO and not isinstance(e, MetaWriteFailed):  # the store logs its own, once
                log.error("%s: %s", handler.__name__, e)
            raise pyfuse3.FUSEError(e.errno) from None
        except OSError as e:
            log.error("%s failed: %s", handler.__name__, e)
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        except Exception:
            log.exception("%s failed unexpectedly", handler.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


def translate_errors(cls: type) -> type:
    """Wrap every async request handler the class defines."""
    for name, member in list(vars(cls).items()):
        if inspect.iscoroutinefunction(member) and not name.startswith("_"):
            setattr(cls, name, _translate(member))
    return cls
