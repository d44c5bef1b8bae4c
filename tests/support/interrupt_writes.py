"""Run the GraphMend CLI and interrupt it in the middle of writing a file: a test harness.

``python -m tests.support.interrupt_writes SIGNAL FOLDER -- ARGS...`` runs ``graphmend ARGS``
with every file opened for writing inside FOLDER written in 64 KiB pieces; after the first
piece the process sends itself SIGNAL (``KILL`` or ``INT``). Whatever the writer does (write in
place, or write a copy and rename it), the signal arrives while a file is half written.
"""

from __future__ import annotations

import builtins
import io
import os
import signal
import sys

CHUNK = 64 * 1024


class _Interrupted:
    def __init__(self, f, sig: int):
        self._f, self._sig = f, sig

    def write(self, data):
        for start in range(0, len(data), CHUNK):
            self._f.write(data[start : start + CHUNK])
            self._f.flush()
            if start + CHUNK < len(data):
                os.kill(os.getpid(), self._sig)
        return len(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)


def main() -> int:
    sig = getattr(signal, "SIG" + sys.argv[1])
    # SIGINT raises KeyboardInterrupt, as in a terminal, even when the parent (a test worker) left
    # it ignored for its children
    signal.signal(signal.SIGINT, signal.default_int_handler)
    folder = os.path.realpath(sys.argv[2])
    args = sys.argv[sys.argv.index("--") + 1 :]
    real_open, real_fdopen = io.open, os.fdopen

    def writing_inside(file, mode) -> bool:
        if not isinstance(file, (str, bytes, os.PathLike)):
            return False
        return any(c in mode for c in "wax+") and os.path.realpath(os.fsdecode(file)).startswith(folder + os.sep)

    def patched_open(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        return _Interrupted(f, sig) if writing_inside(file, mode) else f

    def patched_fdopen(fd, mode="r", *a, **k):
        f = real_fdopen(fd, mode, *a, **k)
        path = os.readlink(f"/proc/self/fd/{fd}")
        return _Interrupted(f, sig) if writing_inside(path, mode) else f

    builtins.open = io.open = patched_open
    os.fdopen = patched_fdopen
    from graphmend.cli import main as graphmend

    return graphmend(args)


if __name__ == "__main__":
    sys.exit(main())
