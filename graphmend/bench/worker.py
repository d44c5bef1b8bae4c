"""The worker side of ``bench``: time one tree's target in a fresh process.

One call of ``bench_task`` measures one arm at one batch size, compiled or eager:

- cold start: wall time of the first call, compilation included, in a process whose
  ``TORCHINDUCTOR_CACHE_DIR`` is private and empty (nothing reused from an earlier run);
- steady state: every call of ``repeat`` after ``warmup`` timed alone, with device
  synchronisation, and the median kept (the mean is at the mercy of one hiccup);
- on CUDA, the number of device synchronisations in one call, from the profiler (a graph
  break that reads a tensor value on the host syncs the device).

Threads are pinned (``torch.set_num_threads``) so two arms measured one after the other get
the same CPU. Only numbers go back to the parent (JSON).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from graphmend.targets import load_target, with_dynamo_config

# Profiler event names that block the host until the device is done.
SYNC_EVENTS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def count_cuda_syncs(fn: Any, args: tuple, kwargs: dict) -> int:
    """Synchronising CUDA runtime calls made by one call of ``fn``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args, **kwargs)
    # A host read of a device value (.item(), bool(tensor)) is a device-to-host copy followed
    # by cudaStreamSynchronize; counting the blocking calls counts each such read once.
    return sum(1 for event in prof.events() if event.name in SYNC_EVENTS)


def _time_calls(fn: Any, args: tuple, kwargs: dict, device: str, warmup: int, repeat: int) -> list[float]:
    """Wall time of each of ``repeat`` calls after ``warmup`` untimed ones, each synchronised."""
    for _ in range(warmup):
        fn(*args, **kwargs)
    _sync(device)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        _sync(device)
        samples.append(time.perf_counter() - t0)
    return samples


def bench_task(payload: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """``payload``: ``target`` (a TargetConfig as a dict), ``compile`` (bool), ``warmup``,
    ``repeat``, ``batch_size`` (or null), ``threads``, ``eager`` (bool: also time the
    uncompiled call after the compiled ones)."""
    # Before torch is imported: inductor reads its cache location from the environment.
    cache = scratch / "inductor-cache"
    cache.mkdir(exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    import torch

    threads = int(payload.get("threads") or 1)
    torch.set_num_threads(threads)
    torch.manual_seed(int(payload.get("seed", 0)))
    target = payload["target"]
    batch_size = payload.get("batch_size")
    loaded = load_target(target, batch_size=batch_size)
    device = loaded.device
    backend = target.get("backend", "inductor")
    graphs = 0
    fn = loaded.fn
    if payload.get("compile", True):
        from torch._dynamo import lookup_backend

        real = lookup_backend(backend)

        def counting_backend(gm: Any, example_inputs: Any) -> Any:
            nonlocal graphs
            graphs += 1
            return real(gm, example_inputs)

        torch._dynamo.reset()
        fn = with_dynamo_config(torch.compile(loaded.fn, backend=counting_backend), target)
    args, kwargs = loaded.args, loaded.kwargs
    # Inference in eval mode, as it would be served; train mode keeps autograd on.
    grad_context = torch.no_grad() if target.get("mode", "eval") == "eval" else torch.enable_grad()
    warmup, repeat = int(payload.get("warmup", 3)), int(payload.get("repeat", 20))
    eager_steady = None
    with grad_context:
        _sync(device)
        started = time.perf_counter()
        fn(*args, **kwargs)
        _sync(device)
        cold = time.perf_counter() - started
        samples = _time_calls(fn, args, kwargs, device, warmup, repeat)
        syncs = count_cuda_syncs(fn, args, kwargs) if device == "cuda" else None
        if payload.get("compile", True) and payload.get("eager", False):
            # The same tree uncompiled, in the same process after the compiled calls: one
            # process per arm and round gives all three figures, and eager steady state does
            # not depend on what ran before it once warmed up.
            eager_steady = statistics.median(_time_calls(loaded.fn, args, kwargs, device, warmup, repeat))
    steady = statistics.median(samples)
    items = batch_size if batch_size else 1
    return {
        "compiled": bool(payload.get("compile", True)),
        "cold_start_s": cold,
        "steady_s": steady,
        "steady_min_s": min(samples),
        "samples": len(samples),
        "batch_size": batch_size,
        "throughput": items / steady if steady > 0 else None,
        "eager_steady_s": eager_steady,
        "graph_count": graphs,
        "cuda_syncs_per_call": syncs,
        "threads": threads,
        "environment": {
            "torch_version": torch.__version__,
            "device": device,
            "dtype": str(loaded.dtype).replace("torch.", ""),
            "backend": backend if payload.get("compile", True) else "none (eager)",
            "mode": target.get("mode", "eval"),
            "python_version": sys.version.split()[0],
        },
    }
