"""Logging helpers in the style of ``transformers.utils.logging``."""

import functools
import logging


@functools.lru_cache(None)
def warning_once(self, *args, **kwargs):
    """Emit a warning only once per message (the cache key is the arguments)."""
    self.warning(*args, **kwargs)


logging.Logger.warning_once = warning_once


def get_logger(name):
    return logging.getLogger(name)
