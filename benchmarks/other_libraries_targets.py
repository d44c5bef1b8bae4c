"""Targets: entry points of diffusers, kornia and torchmetrics, called as their users call them.

``benchmarks/other_libraries_table.py`` copies this file into a throwaway repository as
``tools/graphmend_targets.py``, beside copies of the three packages under ``src/``; the worker
compiles each factory's callable, outside the packages. Everything is tiny, fp32, CPU, with random
data (seeded) and no download.

* diffusers schedulers: ``scale_model_input`` then ``step``, as a sampling loop calls them at its
  first step (each call resets the scheduler's per-loop counters first, as ``set_timesteps`` does;
  otherwise the eager and the compiled call would be different steps). DDPM has no input scaling
  and no counters: its ``step`` is called as is, at the last timestep (no noise is drawn).
* kornia: an edge detector and a colour augmentation (``p=1``; verify seeds every call).
* torchmetrics: functional metrics on class probabilities or regression pairs. Each factory calls
  the metric once eagerly first, as a training loop's first call would: torchmetrics evaluates an
  installed-package check (``torch_xla``) lazily on first use, which Dynamo cannot trace.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

# The attributes a sampling loop's first step starts from (those a scheduler has).
_FIRST_STEP = {"_step_index": None, "_begin_index": None, "lower_order_nums": 0, "last_sample": None,
               "this_order": None, "prev_derivative": None, "dt": None, "sample": None}


def _image(channels=3, size=16, batch=2):
    torch.manual_seed(0)
    return torch.rand(batch, channels, size, size)


def _scheduler_step(name, **kwargs):
    import diffusers

    s = getattr(diffusers, name)(num_train_timesteps=100, **kwargs)
    s.set_timesteps(10)
    reset = {k: v for k, v in _FIRST_STEP.items() if hasattr(s, k)}
    outputs = len(s.model_outputs) if hasattr(s, "model_outputs") else None
    timesteps = len(s.timestep_list) if hasattr(s, "timestep_list") else None
    scale = getattr(s, "scale_model_input", None)  # flow matching has no input scaling

    def step(model_output, timestep, sample):
        for k, v in reset.items():
            setattr(s, k, v)
        if outputs is not None:
            s.model_outputs = [None] * outputs
        if timesteps is not None:
            s.timestep_list = [None] * timesteps
        scaled = scale(sample, timestep) if scale else sample  # what the loop gives its model
        return scaled, s.step(model_output, timestep, sample).prev_sample

    x = _image(4, 8)
    return step, (torch.randn_like(x), s.timesteps[0], x), {}


def ddpm_step(dtype=torch.float32, device="cpu"):
    import diffusers

    s = diffusers.DDPMScheduler(num_train_timesteps=100)
    s.set_timesteps(10)
    x = _image(4, 8)
    return s.step, (torch.randn_like(x), 0, x), {}  # the last step: no noise is added


def euler_step(dtype=torch.float32, device="cpu"):
    return _scheduler_step("EulerDiscreteScheduler")


def heun_step(dtype=torch.float32, device="cpu"):
    return _scheduler_step("HeunDiscreteScheduler")


def dpm_solver_step(dtype=torch.float32, device="cpu"):
    return _scheduler_step("DPMSolverMultistepScheduler")


def unipc_step(dtype=torch.float32, device="cpu"):
    return _scheduler_step("UniPCMultistepScheduler")


def flow_match_euler_step(dtype=torch.float32, device="cpu"):
    return _scheduler_step("FlowMatchEulerDiscreteScheduler")


def kornia_canny(dtype=torch.float32, device="cpu"):
    import kornia

    return kornia.filters.canny, (_image(),), {}


def kornia_color_jitter(dtype=torch.float32, device="cpu"):
    import kornia.augmentation as K

    return K.ColorJitter(0.1, 0.1, 0.1, 0.1, p=1.0), (_image(),), {}


def _metric(fn, args, **kwargs):
    fn(*args, **kwargs)
    return fn, args, kwargs


def _classes():
    torch.manual_seed(0)
    return torch.rand(16, 5).softmax(-1), torch.randint(0, 5, (16,))


def _pairs():
    torch.manual_seed(0)
    return torch.rand(32), torch.rand(32)


def tm_f1_score(dtype=torch.float32, device="cpu"):
    from torchmetrics.functional import f1_score

    return _metric(f1_score, _classes(), task="multiclass", num_classes=5, average="macro")


def tm_confusion_matrix(dtype=torch.float32, device="cpu"):
    from torchmetrics.functional import confusion_matrix

    return _metric(confusion_matrix, _classes(), task="multiclass", num_classes=5)


def tm_auroc(dtype=torch.float32, device="cpu"):
    from torchmetrics.functional import auroc

    return _metric(auroc, _classes(), task="multiclass", num_classes=5)


def tm_calibration_error(dtype=torch.float32, device="cpu"):
    from torchmetrics.functional import calibration_error

    return _metric(calibration_error, _classes(), task="multiclass", num_classes=5)


def tm_pearson(dtype=torch.float32, device="cpu"):
    from torchmetrics.functional import pearson_corrcoef

    return _metric(pearson_corrcoef, _pairs())


def tm_spearman(dtype=torch.float32, device="cpu"):
    from torchmetrics.functional import spearman_corrcoef

    return _metric(spearman_corrcoef, _pairs())


def tm_r2(dtype=torch.float32, device="cpu"):
    from torchmetrics.functional import r2_score

    return _metric(r2_score, _pairs())


def tm_retrieval_ap(dtype=torch.float32, device="cpu"):
    from torchmetrics.functional.retrieval import retrieval_average_precision

    torch.manual_seed(0)
    return _metric(retrieval_average_precision, (torch.rand(10), torch.randint(0, 2, (10,))))


# target name -> factory, in table order
ENTRY_POINTS = ("ddpm_step", "euler_step", "heun_step", "dpm_solver_step", "unipc_step", "flow_match_euler_step",
                "kornia_canny", "kornia_color_jitter", "tm_f1_score", "tm_confusion_matrix", "tm_auroc",
                "tm_calibration_error", "tm_pearson", "tm_spearman", "tm_r2", "tm_retrieval_ap")
