"""One module per CLI verb: ``HELP``-free, with ``add_arguments(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphmend.config import Config, load_config


class UsageError(Exception):
    """A usage error; the CLI exits with 2 and prints the message on one line."""


def config_from_args(args: argparse.Namespace) -> Config:
    """The configuration for a verb: ``--config`` or the file at ``--root``."""
    return load_config(Path(args.root), args.config)
