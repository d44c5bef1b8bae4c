"""``python -m tests.security.drive JOB RUNNER ROOT [ARG] [--image IMAGE --docker-host HOST]``.

The parent side of an attack test in a fresh process, as the action runs it: started with the
canary secret in its environment at exec time (so it is in ``/proc/<pid>/environ``, where a
worker would look for it), it runs one job and prints the ``JobResult`` and its own peak RSS as
JSON. JOB: ``call`` (ARG: the ``module:function`` to run in the worker, with ``--scratch`` kept)
or ``print`` (ARG: how many bytes the worker prints to stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
from pathlib import Path

from graphmend.runner import Job


def peak_rss_mb() -> float:
    """This process's own peak RSS. ``VmHWM`` belongs to the address space exec made;
    ``ru_maxrss`` also keeps the high-water mark of the forked image before exec (a pytest worker
    with torch loaded: ~450 MB that this process never used)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("job", choices=["call", "print"])
    parser.add_argument("runner", choices=["subprocess", "docker"])
    parser.add_argument("root")
    parser.add_argument("arg")
    parser.add_argument("--scratch")
    parser.add_argument("--image")
    parser.add_argument("--docker-host")
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args(argv)
    if args.runner == "docker":
        from graphmend.runner.docker import DockerRunner

        runner = DockerRunner(args.image, memory="512m", pids=256, cpus=1, base_url=args.docker_host)
    else:
        from graphmend.runner.subprocess import SubprocessRunner

        runner = SubprocessRunner()
    payload = ({"action": "call", "entry": args.arg} if args.job == "call"
               else {"action": "print", "bytes": int(args.arg), "stream": "stderr"})
    result = runner.run(Job(task="selftest", payload=payload, root=Path(args.root), timeout_s=args.timeout,
                            scratch=Path(args.scratch) if args.scratch else None, label="attack"))
    peak_mb = peak_rss_mb()
    print(json.dumps({**dataclasses.asdict(result), "peak_rss_mb": peak_mb}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
