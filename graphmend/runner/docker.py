"""The container runner: a job's worker in a locked-down docker container (docker SDK).

The pull-request code GraphMend runs is untrusted, so the container gets:

- no network (``network_mode="none"``): the image must already hold the model's dependencies
  (the project's CI image, or one built ``FROM`` GraphMend's image that installs them);
- the source tree mounted read-only at ``/workspace`` and a private writable scratch folder at
  ``/scratch`` (the worker's request, response, tensors and caches), nothing else of the host;
- a read-only root filesystem with a small ``/tmp``, all capabilities dropped,
  ``no-new-privileges``, the host user's uid (so the parent can read and remove the scratch);
- memory (no extra swap), pids and CPU limits, and a timeout after which it is killed;
- its stdout and stderr streamed back with a cap (head and tail kept), never written through a
  name inside the scratch folder, and ``response.json`` read through ``graphmend.runner.channel``
  (no symlink, FIFO, socket or device is followed or waited on); docker's own log of the
  container is capped too (``LOG_MAX``), and the container is removed however the job ends;
- only allow-listed environment variables (``graphmend.runner.allowed_env``): no token or other
  secret of the runner host ever reaches it;
- GPUs only when the job's device is ``cuda``, through a ``DeviceRequest``, which needs the
  NVIDIA Container Toolkit on the host (``nvidia-ctk runtime configure --runtime=docker``).

The image (``sandbox.image``). The container cannot install anything, so the image must hold
Python, torch and everything the model imports. Either use the project's CI image (GraphMend's
package is mounted in, see below), or build one ``FROM`` GraphMend's image (the repository's
``Dockerfile``) that adds the model's dependencies::

    FROM graphmend:latest
    COPY requirements.txt /tmp/requirements.txt
    RUN python -m pip install --no-cache-dir -r /tmp/requirements.txt

and build it on the runner host (``docker build -t my-model-sandbox .``) before the job runs.

GPUs. A cuda target's container gets ``DeviceRequest(count=-1, capabilities=[["gpu"]])``,
which works only when the host has the NVIDIA driver and the NVIDIA Container Toolkit with the
docker runtime registered (``nvidia-ctk runtime configure --runtime=docker``, then restart
docker); without it the job fails with a message that says so, and nothing runs.

GraphMend's own package is mounted read-only from the host at ``/opt/graphmend`` by default,
so the worker speaks exactly the parent's protocol whatever version the image has; pass
``mount_graphmend=False`` to use the image's installation.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from graphmend.runner import Job, JobResult, allowed_env
from graphmend.runner.channel import CappedStream, clean_text
from graphmend.runner.subprocess import job_scratch, read_response, write_request

WORKSPACE = "/workspace"
SCRATCH = "/scratch"
GRAPHMEND_MOUNT = "/opt/graphmend"
GRAPHMEND_PACKAGE = Path(__file__).resolve().parents[1]  # .../graphmend

# Host-specific variables that would point the container at paths it does not have.
LOG_MAX = {"max-size": "64m", "max-file": "1"}  # what the daemon keeps on disk of a container's output
HOST_ONLY = {"PATH", "HOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "TMPDIR", "USER", "LOGNAME", "CUDA_HOME", "SSL_CERT_FILE", "HF_HOME"}

NVIDIA_HELP = ("GPUs were requested (target device cuda) but the docker daemon cannot provide them: install the "
               "NVIDIA Container Toolkit on the runner host and register its runtime "
               "(nvidia-ctk runtime configure --runtime=docker, then restart docker)")


class DockerRunner:
    name = "docker"

    def __init__(self, image: Optional[str], memory: str = "16g", *, pids: int = 4096, cpus: Optional[float] = None,
                 base_url: Optional[str] = None, mount_graphmend: bool = True, tmp_size: str = "256m"):
        if not image:
            raise ValueError("the docker runner needs an image (sandbox.image)")
        self.image, self.memory, self.pids = image, memory, pids
        # No more CPUs than this process may use itself (also the count bench pins threads to).
        self.cpus = cpus if cpus is not None else float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        self.base_url, self.mount_graphmend, self.tmp_size = base_url, mount_graphmend, tmp_size
        self._client: Any = None

    # ----------------------------------------------------------------------------------------

    def client(self) -> Any:
        if self._client is None:
            import docker

            self._client = docker.DockerClient(base_url=self.base_url) if self.base_url else docker.from_env()
        return self._client

    def environment(self, job: Job) -> dict[str, str]:
        """What the container sees: the allow-list minus host paths, then the job's own."""
        env = {k: v for k, v in allowed_env(dict(os.environ)).items() if k not in HOST_ONLY}
        env.update(allowed_env(dict(job.env)))
        env.update({
            "PYTHONPATH": WORKSPACE + (os.pathsep + GRAPHMEND_MOUNT if self.mount_graphmend else ""),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "HOME": f"{SCRATCH}/home",
            "TMPDIR": f"{SCRATCH}/tmp",
            "MPLCONFIGDIR": f"{SCRATCH}/tmp",
        })
        return env

    def run(self, job: Job) -> JobResult:
        with job_scratch(job) as scratch:
            return self._run(job, scratch)

    def _run(self, job: Job, scratch: Path) -> JobResult:
        import docker
        import requests

        started = time.monotonic()
        run_id = uuid.uuid4().hex
        for sub in ("home", "tmp"):
            (scratch / sub).mkdir(exist_ok=True)
        write_request(scratch, job, WORKSPACE)
        try:
            client = self.client()
            client.images.get(self.image)
        except docker.errors.ImageNotFound:
            return JobResult(ok=False, error=f"docker image {self.image!r} is not on the docker daemon (the sandbox has no "
                                             "network to pull it: build or load it first)")
        except docker.errors.DockerException as exc:
            return JobResult(ok=False, error=f"cannot reach the docker daemon: {_one_line(exc)}")

        volumes = {
            str(Path(job.root).resolve()): {"bind": WORKSPACE, "mode": "ro"},
            str(scratch.resolve()): {"bind": SCRATCH, "mode": "rw"},
        }
        tmpfs = {"/tmp": f"size={self.tmp_size}"}
        git_dir = Path(job.root).resolve() / ".git"
        if git_dir.is_dir() and not git_dir.is_symlink():
            # The checkout's git folder stays out: .git/config holds the token actions/checkout persists.
            tmpfs[f"{WORKSPACE}/.git"] = "ro,size=4k"
        if self.mount_graphmend:
            volumes[str(GRAPHMEND_PACKAGE)] = {"bind": f"{GRAPHMEND_MOUNT}/graphmend", "mode": "ro"}
        options: dict[str, Any] = dict(
            image=self.image,
            command=["python", "-m", "graphmend.worker", SCRATCH],
            working_dir=WORKSPACE,
            environment=self.environment(job),
            volumes=volumes,
            network_mode="none",
            user=f"{os.getuid()}:{os.getgid()}",
            read_only=True,
            tmpfs=tmpfs,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=self.memory,
            memswap_limit=self.memory,  # the same figure: no swap on top of the limit
            pids_limit=self.pids,
            detach=True,
            log_config=docker.types.LogConfig(type="json-file", config=LOG_MAX),
            labels={"graphmend.job": job.label or job.task, "graphmend.run": run_id},
        )
        if self.cpus:
            options["nano_cpus"] = int(self.cpus * 1e9)
        if job.device == "cuda":
            options["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]

        container = None
        try:
            try:
                container = client.containers.run(**options)
            except docker.errors.APIError as exc:
                message = _one_line(exc)
                if job.device == "cuda" and ("gpu" in message.lower() or "nvidia" in message.lower() or "device driver" in message.lower()):
                    return JobResult(ok=False, error=f"{NVIDIA_HELP} (docker said: {message})")
                return JobResult(ok=False, error=f"the container could not start: {message}")
            try:
                status = container.wait(timeout=job.timeout_s)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                _kill(container)
                stderr = _stream_logs(container)
                return JobResult(ok=False, timed_out=True, error=f"timed out after {job.timeout_s:g} s (the container was killed)",
                                 stderr_tail=clean_text(stderr), duration_s=time.monotonic() - started)
            returncode = int(status.get("StatusCode", -1))
            stderr = _stream_logs(container)
            container.reload()
            state = container.attrs.get("State", {})
            if state.get("OOMKilled"):
                return JobResult(ok=False, error=f"the worker ran past its memory limit ({self.memory}) and was killed",
                                 returncode=returncode, stderr_tail=clean_text(stderr), duration_s=time.monotonic() - started)
            if returncode == 137 and not os.path.lexists(scratch / "response.json"):
                # The kernel's OOM killer does not always mark the container (a child process).
                return JobResult(ok=False, error=f"the worker was killed by SIGKILL (out of memory? the limit is {self.memory})",
                                 returncode=returncode, stderr_tail=clean_text(stderr), duration_s=time.monotonic() - started)
            return read_response(scratch, job, returncode, stderr, started)
        finally:
            _remove(client, container, run_id)


REMOVE_ATTEMPTS = 12


def _remove(client: Any, container: Any, run_id: str) -> None:
    """Remove the job's container however the job ended: also one whose start failed after it was
    created (found by its run label), retried while the daemon is busy or a removal is under way."""
    import docker
    import requests

    # A container that wrote a flood of output, or whose runtime is slow to let go of it under
    # load, can refuse removal for several seconds (runc "did not terminate"): about 30 s in all.
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            found = [container] if container is not None else client.containers.list(
                all=True, filters={"label": f"graphmend.run={run_id}"})
            for c in found:
                c.remove(force=True)
            return
        except docker.errors.NotFound:
            return
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            time.sleep(min(0.5 * (attempt + 1), 3.0))


def _stream_logs(container: Any) -> str:
    """The end of the container's stderr, saying how much came before it (its stdout is not read).

    Read as a stream so the parent's memory does not grow with what the worker printed."""
    err = CappedStream()
    try:
        for chunk in container.logs(stdout=False, stderr=True, stream=True, follow=False):
            err.feed(chunk)
    except Exception:  # noqa: BLE001 - logs are a courtesy; the response file is the result
        pass
    return err.tail_text()


def _kill(container: Any) -> None:
    try:
        container.kill()
    except Exception:  # noqa: BLE001 - it may have exited on its own meanwhile
        pass


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    return " ".join(str(text).split())
