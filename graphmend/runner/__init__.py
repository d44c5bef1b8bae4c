"""Runners execute user code (targets) in isolation: one interface, several mechanisms.

The parent describes a ``Job`` (a task name from ``graphmend.worker.TASKS`` and a JSON
payload); a runner starts ``python -m graphmend.worker SCRATCH`` somewhere isolated (a fresh
interpreter, or a container) and reads back ``response.json`` from the scratch folder. Worker
and parent exchange only JSON and files the parent chooses how to load (tensors with
``weights_only=True``): the parent never unpickles arbitrary objects from user code.

A job that raises, hangs, or kills its process becomes a ``JobResult`` with ``error`` set;
it never raises into the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol

from graphmend.config import Config


@dataclass(frozen=True)
class Job:
    task: str
    payload: dict[str, Any]
    root: Path  # the repository root user code is imported from
    timeout_s: float = 900
    scratch: Optional[Path] = None  # kept for the caller when given; else a temp dir removed after
    env: dict[str, str] = field(default_factory=dict)  # extra variables, on top of the allow-list
    device: str = "cpu"  # "cuda" asks a container runner to pass GPUs
    label: str = ""  # what the job is about, for error messages ("target tiny-bart")


@dataclass(frozen=True)
class JobResult:
    ok: bool
    data: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    timed_out: bool = False
    returncode: Optional[int] = None
    stderr_tail: str = ""
    duration_s: float = 0.0


class Runner(Protocol):
    name: str

    def run(self, job: Job) -> JobResult: ...


# Variables a worker may see. Everything else (tokens, cloud credentials, the runner's own
# secrets) stays out; names that look like secrets are dropped even when a prefix matches.
ENV_ALLOW_EXACT = {
    "PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "USER", "LOGNAME",
    "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "SSL_CERT_FILE",
}
ENV_ALLOW_PREFIXES = ("LC_", "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "NVIDIA_", "PYTORCH_", "GRAPHMEND_WORKER_")
SECRET_RE = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|_KEY$|^AWS_|^GITHUB_|^ACTIONS_", re.I)


def allowed_env(environ: dict[str, str]) -> dict[str, str]:
    """The part of ``environ`` a worker may inherit."""
    out = {}
    for name, value in environ.items():
        if SECRET_RE.search(name):
            continue
        if name in ENV_ALLOW_EXACT or name.startswith(ENV_ALLOW_PREFIXES):
            out[name] = value
    return out


def unsandboxed_reason(config: Config) -> Optional[str]:
    """None when the configured runner is a boundary for hostile code; else why it is not."""
    if config.sandbox.runner == "docker":
        return None
    from graphmend.runner.subprocess import bwrap_problem

    return bwrap_problem()


def get_runner(config: Config) -> Runner:
    """The runner the configuration asks for (``sandbox.runner``)."""
    if config.sandbox.runner == "docker":
        from graphmend.runner.docker import DockerRunner

        return DockerRunner(image=config.sandbox.image, memory=config.sandbox.memory)
    from graphmend.runner.subprocess import SubprocessRunner

    return SubprocessRunner(memory=config.sandbox.memory)
