"""Dtype classes: which operations raise or warn for which kinds of tensor, and which submodules
make a floating-point tensor whatever they are called with.

A predicated site (GM101, GM402) evaluates the branch not taken too, so an operation there must
not raise or warn for its operands' dtypes (``mask - 1`` raises for a bool tensor, ``z.clamp(0)``
for a complex one, ``z.float()`` of a complex one warns). The analysis (``_analysis.dtype_classes``)
reasons about four classes of dtype, not single dtypes: bool, integer (signed and unsigned),
floating point, complex. A value's classes are a superset of what it may hold: every class where
the source does not tell.

The lists are data; ``tests/transforms/test_dtypes.py`` runs each entry against torch.
"""

from __future__ import annotations

# The dtype classes the lists speak of (a representative of each is what the vetting test runs).
DTYPE_CLASSES = ("bool", "int", "float", "complex")
# Ops with no kernel for operands of some dtype classes: name -> (the classes it raises for, the
# call the vetting test runs on an ``x`` of each class: it raises for exactly those listed).
# Operators are listed by their method: ``-x`` neg, ``a - b`` sub, ``~x`` bitwise_not, ``a < b`` lt.
DTYPE_RAISES: dict[str, tuple[str, str]] = {
    "neg": ("bool", "x.neg()"), "negative": ("bool", "torch.negative(x)"), "sub": ("bool", "x.sub(1)"),
    "subtract": ("bool", "torch.subtract(x, 1)"), "rsub": ("bool", "1 - x"), "abs": ("bool", "x.abs()"),
    "absolute": ("bool", "torch.absolute(x)"), "relu": ("bool complex", "x.relu()"),
    "floor": ("bool complex", "x.floor()"), "ceil": ("bool complex", "x.ceil()"), "round": ("bool complex", "x.round()"),
    "trunc": ("bool complex", "x.trunc()"), "frac": ("bool int complex", "x.frac()"),
    "softmax": ("bool int complex", "x.softmax(-1)"), "log_softmax": ("bool int complex", "x.log_softmax(-1)"),
    "mean": ("bool int", "x.mean()"), "norm": ("bool int", "x.norm()"), "std": ("bool int", "x.std()"),
    "var": ("bool int", "x.var()"), "lerp": ("bool int", "x.lerp(x, 0.5)"), "clamp": ("complex", "x.clamp(min=0)"),
    "clip": ("complex", "x.clip(0, 1)"), "clamp_min": ("complex", "x.clamp_min(0)"), "clamp_max": ("complex", "x.clamp_max(1)"),
    "sign": ("complex", "x.sign()"), "signbit": ("complex", "x.signbit()"), "erf": ("complex", "x.erf()"),
    "maximum": ("complex", "x.maximum(x)"), "minimum": ("complex", "x.minimum(x)"), "fmax": ("complex", "x.fmax(x)"),
    "fmin": ("complex", "x.fmin(x)"), "max": ("complex", "x.max()"), "min": ("complex", "x.min()"),
    "amax": ("complex", "x.amax()"), "amin": ("complex", "x.amin()"), "gt": ("complex", "x > 0"), "lt": ("complex", "x < 0"),
    "ge": ("complex", "x >= 0"), "le": ("complex", "x <= 0"), "greater": ("complex", "torch.greater(x, 0)"),
    "less": ("complex", "torch.less(x, 0)"), "greater_equal": ("complex", "torch.greater_equal(x, 0)"),
    "less_equal": ("complex", "torch.less_equal(x, 0)"), "bitwise_not": ("float complex", "~x"),
    "bitwise_and": ("float complex", "x & x"), "bitwise_or": ("float complex", "x | x"),
    "bitwise_xor": ("float complex", "x ^ x"), "lshift": ("float complex", "x << 1"), "rshift": ("float complex", "x >> 1"),
    "pow_negative": ("bool int", "x ** -1"), "masked_fill_mask": ("int float complex", "torch.zeros(2).masked_fill(x, 0)"),
    "where_condition": ("int float complex", "torch.where(x, 1.0, 0.0)"),
}
# Ops that emit a warning for operands of some dtype classes (a complex tensor converted to a real
# dtype: "Casting complex values to real discards the imaginary part"): name -> (classes, call).
# A warning from the arm not taken is output the original program did not produce.
DTYPE_WARNS: dict[str, tuple[str, str]] = {
    "float": ("complex", "x.float()"), "half": ("complex", "x.half()"), "double": ("complex", "x.double()"),
    "bfloat16": ("complex", "x.bfloat16()"), "int": ("complex", "x.int()"), "long": ("complex", "x.long()"),
    "short": ("complex", "x.short()"), "byte": ("complex", "x.byte()"), "char": ("complex", "x.char()"),
    "to": ("complex", "x.to(torch.float32)"), "type": ("complex", "x.type(torch.float32)"),
    "type_as": ("complex", "x.type_as(torch.ones(1))"),
}
# torch.nn modules whose call returns a tensor of these dtype classes whatever it is given: they
# raise for a bool or integer input, cannot be built with (``dtype=``) or converted to (``.to()``)
# such a dtype, and the norms raise for a complex input. name -> (classes, the construction the
# vetting test tries with every dtype, the input it calls it with: ``x`` of the dtype tried).
# ``self.lin(x)`` with ``self.lin`` bound only to such modules (``_reads.Reads.output_classes``) is
# never bool or integer, so ``h - 1`` on it cannot raise.
MODULE_OUTPUTS: dict[str, tuple[str, str, str]] = {
    "Linear": ("float complex", "nn.Linear(4, 4, dtype=d)", "x.reshape(2, 4)"),
    "Bilinear": ("float complex", "nn.Bilinear(4, 4, 4, dtype=d)", "x.reshape(2, 4), x.reshape(2, 4)"),
    "Conv1d": ("float complex", "nn.Conv1d(4, 4, 1, dtype=d)", "x.reshape(1, 4, 2)"),
    "Conv2d": ("float complex", "nn.Conv2d(4, 4, 1, dtype=d)", "x.reshape(1, 4, 2, 1)"),
    "Conv3d": ("float complex", "nn.Conv3d(4, 4, 1, dtype=d)", "x.reshape(1, 4, 2, 1, 1)"),
    "ConvTranspose1d": ("float complex", "nn.ConvTranspose1d(4, 4, 1, dtype=d)", "x.reshape(1, 4, 2)"),
    "ConvTranspose2d": ("float complex", "nn.ConvTranspose2d(4, 4, 1, dtype=d)", "x.reshape(1, 4, 2, 1)"),
    "ConvTranspose3d": ("float complex", "nn.ConvTranspose3d(4, 4, 1, dtype=d)", "x.reshape(1, 4, 2, 1, 1)"),
    "Embedding": ("float complex", "nn.Embedding(8, 4, dtype=d)", "x.reshape(2, 4)"),
    "EmbeddingBag": ("float", "nn.EmbeddingBag(8, 4, dtype=d)", "x.reshape(2, 4)"),
    "LayerNorm": ("float", "nn.LayerNorm(4, dtype=d)", "x.reshape(2, 4)"),
    "GroupNorm": ("float", "nn.GroupNorm(2, 4, dtype=d)", "x.reshape(2, 4)"),
    "BatchNorm1d": ("float", "nn.BatchNorm1d(4, dtype=d)", "x.reshape(2, 4)"),
    "BatchNorm2d": ("float", "nn.BatchNorm2d(4, dtype=d)", "x.reshape(1, 4, 2, 1)"),
    "RMSNorm": ("float complex", "nn.RMSNorm(4, dtype=d)", "x.reshape(2, 4)"),
}

# The constructor parameters of each MODULE_OUTPUTS entry whose values the entry's classes hold
# for (in order: a positional argument is one of the first ones): sizes and flags. Not ``device``,
# ``dtype`` or the private ``_weight``/``_freeze`` (an Embedding over a bool ``_weight`` returns
# bool); a module built with any other argument proves no dtype class.
MODULE_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "Linear": ("in_features", "out_features", "bias"),
    "Bilinear": ("in1_features", "in2_features", "out_features", "bias"),
    **{f"Conv{n}d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups",
                     "bias", "padding_mode") for n in (1, 2, 3)},
    **{f"ConvTranspose{n}d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "output_padding",
                              "groups", "bias", "dilation", "padding_mode") for n in (1, 2, 3)},
    "Embedding": ("num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq",
                  "sparse"),
    "EmbeddingBag": ("num_embeddings", "embedding_dim", "max_norm", "norm_type", "scale_grad_by_freq", "mode",
                     "sparse"),
    "LayerNorm": ("normalized_shape", "eps", "elementwise_affine", "bias"),
    "GroupNorm": ("num_groups", "num_channels", "eps", "affine"),
    "BatchNorm1d": ("num_features", "eps", "momentum", "affine", "track_running_stats"),
    "BatchNorm2d": ("num_features", "eps", "momentum", "affine", "track_running_stats"),
    "RMSNorm": ("normalized_shape", "eps", "elementwise_affine"),
}


def classes_text(classes) -> str:
    """Dtype classes as the analysis records them for a name: space-separated, in list order."""
    return " ".join(c for c in DTYPE_CLASSES if c in classes)
