"""Effects and aliases: what an expression may write, alias, raise or make non-finite.

The rules share this module to prove that a rewrite keeps the program's behaviour. Every
question is answered conservatively: anything not on a vetted list is assumed to do the worst.

- **may-alias** (:func:`alias_roots`): the names whose tensors the value of an expression may be
  (or share storage with, or contain). A view, a no-op conversion (``.float()`` on a float
  tensor, ``.cpu()`` on CPU, ``.to(same)``, ``.contiguous()``) returns its receiver itself; an
  unknown call may return any argument or its receiver.
- **may-write** (:func:`written_roots`): the names whose tensors (or objects) evaluating a node
  may update: an in-place method (``x.add_()``), an ``out=`` argument, an ``inplace=True`` flag
  (``F.relu(x, inplace=True)``), a module built with ``inplace=True`` (``nn.ReLU(inplace=True)``),
  an augmented or subscript/attribute store, and any call this module does not know, which may
  write its arguments and its receiver (``self.cache.update(x)``, ``helper(x)``).
- **may-be-non-finite** (:data:`NON_FINITE_FUNCS`): ops whose value or gradient may be inf/NaN for
  finite inputs (``torch.where`` back-propagates ``0 * grad`` through the unselected arm, and
  ``0 * inf`` is NaN).
  A product of two tensors one of which may overflow (``(x * 1e30) * x``: its backward is
  ``0 * inf``) counts too (:func:`may_overflow`).
- **grad sources** (:func:`grad_sources`): the names and attributes a gradient may flow back to
  from an expression's value. ``torch.where`` makes its result require grad when either arm
  does, and gives every tensor of the arm not taken a zero gradient (the original left it
  ``None``): two arms are interchangeable for autograd only when their grad sources are equal.
- **may-raise / may-consume-RNG**: see ``_analysis.effects`` (the off-predicate evaluation check),
  which draws on the same lists.

The lists are data; ``tests/transforms/test_effects.py`` checks each entry against torch.
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

# Tensor methods that may return their receiver itself or a view of its storage (with the
# arguments the vetting test calls them with). A conversion returns ``self`` when it changes
# nothing: ``.float()`` on float32, ``.cpu()`` on a CPU tensor, ``.to(dtype)`` on that dtype.
ALIAS_METHODS: dict[str, str] = {
    "float": "()", "double": "()", "half": "()", "bfloat16": "()", "int": "()", "long": "()", "short": "()",
    "bool": "()", "byte": "()", "char": "()", "to": "(torch.float32)", "type": "(torch.float32)",
    "type_as": "(x)", "cpu": "()", "contiguous": "()", "detach": "()", "view": "(-1)", "view_as": "(x)",
    "reshape": "(-1)", "reshape_as": "(x)", "expand": "(2, 3)", "expand_as": "(x)", "flatten": "()",
    "unflatten": "(1, (1, 3))", "squeeze": "()", "unsqueeze": "(0)", "transpose": "(0, 1)", "permute": "(1, 0)",
    "movedim": "(0, 1)", "moveaxis": "(0, 1)", "swapaxes": "(0, 1)", "swapdims": "(0, 1)", "t": "()",
    "narrow": "(1, 0, 2)", "select": "(1, 0)", "unbind": "()", "split": "(1)", "chunk": "(2)",
    "diagonal": "()", "as_strided": "((2,), (1,))", "unfold": "(1, 2, 1)", "requires_grad_": "(False)",
}
# Attributes that are views of the tensor (``x.T``, ``x.data``).
ALIAS_ATTRS = frozenset(("T", "mT", "H", "mH", "real", "imag", "data"))
# torch.f(x, ...) that may return ``x`` itself or a view of it.
ALIAS_FUNCS: dict[str, str] = {
    "reshape": "(x, (-1,))", "flatten": "(x)", "squeeze": "(x)", "unsqueeze": "(x, 0)", "transpose": "(x, 0, 1)",
    "permute": "(x, (1, 0))", "movedim": "(x, 0, 1)", "moveaxis": "(x, 0, 1)", "swapaxes": "(x, 0, 1)",
    "narrow": "(x, 1, 0, 2)", "select": "(x, 1, 0)", "unbind": "(x)", "split": "(x, 1)", "chunk": "(x, 2)",
    "detach": "(x)", "t": "(x)", "diagonal": "(x)", "as_strided": "(x, (2,), (1,))", "broadcast_to": "(x, (2, 3))",
    "atleast_1d": "(x)", "atleast_2d": "(x)", "atleast_3d": "(x)", "view_as_real": "(x.to(torch.complex64))",
    "as_tensor": "(x)", "asarray": "(x)", "tensor_split": "(x, 2, 1)", "hsplit": "(x, 1)", "vsplit": "(x, 1)",
}
# functional ops taking ``inplace=True``: they write their first argument and return it.
INPLACE_FLAG_FUNCS = frozenset("""
relu relu6 leaky_relu elu selu celu hardtanh hardswish hardsigmoid silu mish threshold rrelu
dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout
""".split())
# nn modules whose ``inplace=True`` makes ``module(x)`` write ``x``.
INPLACE_FLAG_MODULES = frozenset("""
ReLU ReLU6 LeakyReLU ELU SELU CELU Hardtanh Hardswish Hardsigmoid SiLU Mish Threshold RReLU
Dropout Dropout1d Dropout2d Dropout3d
""".split())
# nn modules that never write the tensor they are called with (they may update their own
# buffers, e.g. BatchNorm's running statistics: that is ``self`` state, not the argument).
NON_WRITING_MODULES = frozenset("""
Linear Bilinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d LayerNorm
GroupNorm RMSNorm BatchNorm1d BatchNorm2d BatchNorm3d InstanceNorm1d InstanceNorm2d Embedding
Identity GELU Tanh Sigmoid Softmax LogSoftmax Softplus Flatten Unflatten MaxPool1d MaxPool2d
AvgPool1d AvgPool2d AdaptiveAvgPool1d AdaptiveAvgPool2d AlphaDropout FeatureAlphaDropout
""".split()) | INPLACE_FLAG_MODULES
# nn modules whose call returns a new tensor, never (a view of) its argument, in train and eval
# mode (Dropout returns its input itself in eval mode, Identity/Flatten always: not here).
FRESH_MODULES = frozenset("""
Linear Bilinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d LayerNorm
GroupNorm RMSNorm BatchNorm1d BatchNorm2d BatchNorm3d InstanceNorm1d InstanceNorm2d Embedding
GELU Tanh Sigmoid Softmax LogSoftmax Softplus MaxPool1d MaxPool2d AvgPool1d AvgPool2d
AdaptiveAvgPool1d AdaptiveAvgPool2d ReLU ReLU6 LeakyReLU ELU SELU CELU Hardtanh Hardswish
Hardsigmoid SiLU Mish
""".split())
# Ops whose value or gradient may be inf/NaN for finite inputs (with an example the vetting
# test runs: value or gradient non-finite). ``where`` then back-propagates 0 * inf = NaN.
NON_FINITE_FUNCS: dict[str, str] = {
    "log": "(z)", "log2": "(z)", "log10": "(z)", "log1p": "(-o)", "sqrt": "(z)", "rsqrt": "(z)",
    "reciprocal": "(z)", "pow": "(z, 0.5)", "div": "(o, z)", "true_divide": "(o, z)", "exp": "(o * 1000)",
    "exp2": "(o * 1000)", "expm1": "(o * 1000)",
    "softmax": "(n, -1)", "log_softmax": "(n, -1)", "logsumexp": "(n, -1)", "hypot": "(z, z)",
    "norm": "(o * 1e30)", "std": "(o[:1, :1])", "var": "(o[:1, :1])", "acos": "(o)", "asin": "(o)",
    "atanh": "(o)", "acosh": "(o)", "logit": "(z)", "erfinv": "(o)", "lgamma": "(z)", "digamma": "(z)",
    "xlogy": "(z, z)", "sinh": "(o * 1000)", "cosh": "(o * 1000)", "softmin": "(-n, -1)",
    "cdist": "(o * 1e30, z)", "dist": "(o * 1e30, z)", "prod": "(o * 1e30)",
}
# Ops whose backward gives every operand a zero gradient where the incoming gradient is zero,
# whatever the operand's values (+-inf and NaN included), with the call the vetting test runs on
# such an ``x``. Any other op on a value not proven finite may back-propagate NaN from the arm
# torch.where does not select (``s * s`` on ``-inf``-masked scores: 0 * -inf; ``tanh(nan)``).
FINITE_GRAD_FUNCS: dict[str, str] = {
    "abs": "x.abs()", "absolute": "torch.absolute(x)", "neg": "x.neg()", "negative": "torch.negative(x)",
    "relu": "x.relu()", "relu6": "F.relu6(x)", "hardtanh": "F.hardtanh(x)", "leaky_relu": "F.leaky_relu(x)",
    "threshold": "F.threshold(x, 0.0, 0.0)", "hardshrink": "F.hardshrink(x)", "softshrink": "F.softshrink(x)",
    "clone": "x.clone()", "contiguous": "x.contiguous()", "float": "x.float()", "half": "x.half()",
    "double": "x.double()", "bfloat16": "x.bfloat16()", "to": "x.to(torch.float64)", "type_as": "x.type_as(x)",
    "cpu": "x.cpu()", "sign": "x.sign()", "sgn": "x.sgn()", "floor": "x.floor()", "ceil": "x.ceil()",
    "round": "x.round()", "trunc": "x.trunc()", "frac": "x.frac()", "nan_to_num": "x.nan_to_num()",
    "sum": "x.sum()", "mean": "x.mean()", "cumsum": "x.cumsum(1)", "add": "x.add(1)", "sub": "x.sub(1)",
    "subtract": "torch.subtract(x, 1)", "clamp": "x.clamp(-1, 1)", "clip": "x.clip(-1, 1)",
    "clamp_min": "x.clamp_min(0)", "clamp_max": "x.clamp_max(0)", "masked_fill": "x.masked_fill(x > 0, 0.0)",
    "where": "torch.where(x > 0, x, 0.0)", "maximum": "x.maximum(torch.zeros_like(x))",
    "minimum": "x.minimum(torch.zeros_like(x))", "fmax": "x.fmax(torch.zeros_like(x))",
    "fmin": "x.fmin(torch.zeros_like(x))", "flatten": "x.flatten()", "reshape": "x.reshape(-1)", "view": "x.view(-1)",
    "view_as": "x.view_as(x)", "squeeze": "x.squeeze()", "unsqueeze": "x.unsqueeze(0)", "transpose": "x.transpose(0, 1)",
    "permute": "x.permute(1, 0)", "movedim": "x.movedim(0, 1)", "swapaxes": "x.swapaxes(0, 1)", "t": "x.t()",
    "expand": "x.expand(2, 3)", "expand_as": "x.expand_as(x)", "broadcast_to": "torch.broadcast_to(x, (1, 3))",
    "roll": "x.roll(1, 1)", "flip": "x.flip(1)", "tril": "x.tril()", "triu": "x.triu()", "cat": "torch.cat([x, x])",
    "concat": "torch.concat([x, x])", "concatenate": "torch.concatenate([x, x])", "stack": "torch.stack([x, x])",
    "repeat": "x.repeat(2, 1)", "chunk": "x.chunk(3, 1)[0]", "split": "x.split(1, 1)[0]", "unbind": "x.unbind(1)[0]",
    "narrow": "x.narrow(1, 0, 2)", "select": "x.select(1, 0)", "pad": "F.pad(x, (1, 1))",
}
# Products: the gradient of one operand is the incoming gradient times the other operand, so an
# operand that overflowed to inf gives 0 * inf = NaN in the arm not taken.
PRODUCT_FUNCS = frozenset("mul multiply matmul mm bmm einsum outer baddbmm addmm addbmm addmv mv dot inner kron".split())
# Ops that may turn finite values into very large or infinite ones (with PRODUCT_FUNCS and
# NON_FINITE_FUNCS); a literal at least this large counts too.
MAGNIFYING_FUNCS = frozenset("pow square exp exp2 expm1 cumprod sinh cosh".split())
LARGE_LITERAL = 1e4
# Ops whose result never requires grad (a bool, an integer, a fresh constant, a Python value).
NO_GRAD_FUNCS = frozenset("""
eq ne gt ge lt le greater less greater_equal less_equal isinf isnan isfinite isposinf isneginf isreal
logical_and logical_or logical_not logical_xor any all signbit bitwise_and bitwise_or bitwise_not bitwise_xor
argmax argmin zeros_like ones_like full_like empty_like zeros ones full finfo iinfo new_zeros new_ones new_full
size dim numel is_floating_point is_complex long int bool short byte char detach
""".split())
# Ops whose result requires grad exactly when one of their tensor operands does (vetted: each
# has a derivative; ``heaviside`` for one has none and raises in backward).
GRAD_FUNCS = frozenset("""
abs absolute neg negative exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan tanh sigmoid relu
erf erfc sign sgn floor ceil round trunc frac reciprocal square pow clamp clip clamp_min clamp_max maximum
minimum fmax fmin where lerp add sub subtract mul multiply div true_divide nan_to_num sum mean prod amax amin
max min norm std var logsumexp softmax log_softmax softmin cumsum matmul mm bmm einsum cat concat concatenate
stack transpose permute reshape flatten squeeze unsqueeze view view_as expand expand_as contiguous clone
masked_fill baddbmm addmm outer tril triu diag roll flip movedim swapaxes broadcast_to t float half double
bfloat16 repeat chunk split unbind relu6 gelu silu mish layer_norm group_norm rms_norm linear pad normalize
softplus softsign elu selu celu leaky_relu hardtanh hardswish hardsigmoid glu logsigmoid tanhshrink
softshrink hardshrink threshold hypot atan2 arctan2 cpu
""".split())
# Positional arguments that never carry a gradient: a mask or a condition.
_NO_GRAD_ARG = {"masked_fill": 0, "where": 0}
_FLOAT_DTYPES = frozenset("float16 half bfloat16 float32 float float64 double".split())
# Torch functions that return a Python value or never write: builtins safe to call on anything.
NON_WRITING_BUILTINS = frozenset("""
len isinstance issubclass hasattr getattr callable type id repr str int float bool tuple list
dict set frozenset range enumerate zip reversed sorted min max abs sum any all round divmod hash
iter print format super
""".split())
# list/dict methods: they add or remove references in the container, never write a tensor
# (``alias_classes`` still records that the container now holds its argument).
CONTAINER_METHODS = frozenset("append extend insert pop get keys values items setdefault index count copy".split())
# Container methods that keep their argument: a tensor handed to one leaves with the container.
KEEPING_METHODS = frozenset("append extend insert setdefault add update appendleft".split())


def dotted(node: cst.CSTNode) -> str:
    """``a.b.c`` for a Name/Attribute chain, else ''."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    return ""


def code(node: cst.CSTNode) -> str:
    """The node's code as one logical line (no surrounding parentheses of its own)."""
    bare = node.with_changes(lpar=(), rpar=()) if hasattr(node, "lpar") and getattr(node, "lpar") else node
    return cst.Module(body=[]).code_for_node(bare)


def iter_tree(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for c in node.children:
        yield from iter_tree(c)


def roots(n: cst.CSTNode) -> set[str]:
    """The variable a target or receiver expression belongs to (``a`` of ``a.b[0].c``)."""
    while isinstance(n, (cst.Attribute, cst.Subscript)):
        n = n.value
    return {n.value} if isinstance(n, cst.Name) else set()


class Modules:
    """What the class around a site says about its submodules: ``self.act = nn.ReLU(inplace=True)``."""

    def __init__(self, cls: Optional[cst.ClassDef] = None):
        self.writers: set[str] = set()  # self.<name> modules that write their argument
        self.vetted: set[str] = set()  # self.<name> modules known not to write their argument
        self.fresh: set[str] = set()  # self.<name> modules known to return a new tensor
        if cls is None:
            return
        seen: dict[str, list[bool]] = {}
        fresh: dict[str, list[bool]] = {}
        for node in iter_tree(cls.body):
            if not isinstance(node, cst.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0].target
            if not (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self"):
                continue
            value = node.value
            name = target.attr.value
            ok = (isinstance(value, cst.Call) and dotted(value.func).split(".")[-1] in NON_WRITING_MODULES
                  and dotted(value.func).split(".")[0] in ("nn", "torch"))
            seen.setdefault(name, []).append(ok and not _inplace_flag(value))  # type: ignore[arg-type]
            fresh.setdefault(name, []).append(ok and not _inplace_flag(value)  # type: ignore[arg-type]
                                              and dotted(value.func).split(".")[-1] in FRESH_MODULES)  # type: ignore[union-attr]
            if isinstance(value, cst.Call) and _inplace_flag(value):
                self.writers.add(name)
        self.vetted = {n for n, oks in seen.items() if all(oks)}
        self.fresh = {n for n, oks in fresh.items() if all(oks)}


# torch functions whose result never requires grad, whatever they are given (``torch.tensor``
# copies its data; ``as_tensor`` and ``cat`` do not: they keep a tensor's autograd history).
_PLAIN_FACTORIES = frozenset("""
zeros ones full empty arange linspace logspace eye rand randn randint randperm tensor zeros_like ones_like
full_like empty_like rand_like randn_like randint_like
""".split())
# Tensor methods that keep a tensor that requires no grad so (their arguments are dtypes, devices
# or sizes, never a tensor's values).
_PLAIN_METHODS = frozenset("float double half bfloat16 long int bool short to clone contiguous detach".split())


def _plain(value: cst.BaseExpression, func: Optional[cst.FunctionDef], depth: int = 0) -> bool:
    """Whether ``value`` (in ``func``) is evidently a tensor that requires no grad, or a number: a
    call of a torch factory (``torch.arange(0, dim, 2)``), maybe converted (``.float()``,
    ``.to(device)``), asked for no grad; arithmetic of such values and numbers; a name ``func``
    binds once to one, or a parameter of ``func`` whose default is a number (``dim=16``: taken to
    be given numbers). Another name or argument, another call may hold a tensor that requires grad."""
    if depth > 8 or "requires_grad" in code(value):
        return False
    if isinstance(value, (cst.Integer, cst.Float)):
        return True
    if isinstance(value, cst.UnaryOperation):
        return _plain(value.expression, func, depth + 1)
    if isinstance(value, cst.BinaryOperation):
        return _plain(value.left, func, depth + 1) and _plain(value.right, func, depth + 1)
    if isinstance(value, cst.Name) and func is not None:
        if any(p.name.value == value.value and isinstance(p.default, (cst.Integer, cst.Float))
               for p in func.params.params):
            return True
        bound = [n.value for n in iter_tree(func.body) if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign))
                 and any(value.value in _target_names(t) for t in _targets(n))]
        return len(bound) == 1 and bound[0] is not None and _plain(bound[0], func, depth + 1)
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value in _PLAIN_METHODS:
        value = value.func.value
    if not isinstance(value, cst.Call):
        return False
    head, _, rest = dotted(value.func).partition(".")
    return head == "torch" and rest in _PLAIN_FACTORIES


def _targets(node: cst.CSTNode) -> list[cst.CSTNode]:
    return [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]  # type: ignore[attr-defined]


def _target_names(target: cst.CSTNode) -> set[str]:
    """The names a store's target binds, in tuples and lists too (never one of ``a.b``, ``a[0]``)."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for e in target.elements for n in _target_names(e.value)}
    return _target_names(target.value) if isinstance(target, cst.StarredElement) else set()


def buffers(cls: cst.ClassDef, module: cst.Module) -> set[str]:
    """Names the class registers with ``self.register_buffer("name", value)``, where ``value``
    is a tensor evidently asked for no grad (:func:`_plain`): state, not a trained leaf
    (``requires_grad_()`` on the module and optimizers leave it alone). Anything in the file that
    may make one require grad leaves it out: a name also bound otherwise (``self.name = ...``, a
    second registration that is not plain), one made to require grad anywhere in the file
    (``self.name.requires_grad_()``, ``self.name.requires_grad = True`` or ``|= True``, in this
    class, a subclass or any other); and every buffer is left out where a tensor not named as
    ``self.<name>`` is made to require grad (``for b in self.buffers(): b.requires_grad_()``,
    ``model.t.requires_grad_()``), where ``requires_grad`` may be set by ``setattr``, where a
    buffer is registered by a computed name or on another object, or the ``_buffers`` registry
    is used. Code of other files is not seen (a caller's ``model.t.requires_grad_()``)."""
    found: dict[str, bool] = {}
    for func in (f for f in iter_tree(cls.body) if isinstance(f, cst.FunctionDef)):
        for node in iter_tree(func.body):
            if isinstance(node, cst.Call) and dotted(node.func) == "self.register_buffer" and len(node.args) >= 2:
                name = node.args[0].value
                if isinstance(name, cst.SimpleString):
                    plain = _plain(node.args[1].value, func)  # (in a nested function: judged in each)
                    found[name.evaluated_value] = found.get(name.evaluated_value, True) and plain  # type: ignore[arg-type]
    for node in iter_tree(cls.body):
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Attribute) \
                and dotted(node.target.value) == "self":
            found[node.target.attr.value] = False
    for node in iter_tree(module):
        if isinstance(node, cst.Attribute) and node.attr.value in ("requires_grad_", "requires_grad") \
                and not _read_only(module, node):
            owner = dotted(node.value)
            if owner.startswith("self.") and owner.count(".") == 1:
                found[owner[5:]] = False
            else:
                return set()
        if isinstance(node, cst.Call):
            leaf = node.func.attr.value if isinstance(node.func, cst.Attribute) else dotted(node.func)
            first = node.args[0].value if node.args else None
            if leaf in ("setattr", "__setattr__") and not (
                    len(node.args) > 1 and isinstance(node.args[1].value, cst.SimpleString)
                    and node.args[1].value.evaluated_value != "requires_grad"):
                return set()
            if leaf == "register_buffer" and (not isinstance(first, cst.SimpleString) or dotted(node.func) != "self.register_buffer"):
                return set()
        if isinstance(node, cst.Attribute) and node.attr.value == "_buffers" \
                or isinstance(node, cst.SimpleString) and node.evaluated_value == "_buffers":
            return set()
    return {n for n, ok in found.items() if ok}


def _read_only(module: cst.Module, node: cst.Attribute) -> bool:
    """Whether ``node`` (``<x>.requires_grad``) is only read: not called as ``requires_grad_``
    and not a store's target (``=``, ``|=``, an unpacking)."""
    if node.attr.value == "requires_grad_":
        return False
    return not any(n is node for t in iter_tree(module)
                   if isinstance(t, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For)) for n in iter_tree(t.target))



def _inplace_flag(call: cst.Call) -> bool:
    """``inplace=<anything but False>``: an unknown flag value is taken as True."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "inplace":
            return not (isinstance(a.value, cst.Name) and a.value.value == "False")
    return False


def _callee_kind(call: cst.Call, t) -> tuple[str, str]:
    return t.func(call.func)


def _is_self_module(call: cst.Call) -> Optional[str]:
    f = call.func
    if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self":
        return f.attr.value
    return None


def call_writes(call: cst.Call, t, modules: Modules, known_methods: frozenset[str]) -> tuple[set[str], str]:
    """The roots one call may write, and why (empty when it provably writes none).

    ``known_methods`` are tensor methods known not to write (the caller's vetted list)."""
    kind, name = _callee_kind(call, t)
    args = [a for a in call.args]
    written: set[str] = set()
    why = ""
    for a in args:
        if a.keyword is not None and a.keyword.value == "out":
            written |= set().union(*(roots(e) for e in _elements(a.value)))
            why = f"`{code(call)}` writes its `out=` argument"
    firsts = [a.value for a in args if a.keyword is None and not a.star]
    if _inplace_flag(call):
        written |= roots(firsts[0]) if firsts else set()
        if kind == "method" and isinstance(call.func, cst.Attribute):
            written |= roots(call.func.value)
        why = why or f"`{code(call)}` updates its argument in place (`inplace=`)"
    if name.endswith("_") and not name.endswith("__"):
        if kind == "method" and isinstance(call.func, cst.Attribute):
            written |= roots(call.func.value)
        elif firsts:
            written |= roots(firsts[0])
        why = why or f"`{code(call)}` updates a tensor in place"
    if written or why:
        return written, why
    if kind in ("torch", "F"):
        return set(), ""  # torch's functions write only through `out=`, `inplace=` or a trailing `_`
    own = _is_self_module(call)
    if own is not None and own in modules.writers:
        return set().union(*(roots(v) for v in firsts)), f"`self.{own}` is built with `inplace=True` and writes its argument"
    if own is not None and own in modules.vetted:
        return set(), ""
    if kind == "method" and (name in known_methods or name in CONTAINER_METHODS):
        return set(), ""
    if kind == "other" and name in NON_WRITING_BUILTINS:
        return set(), ""
    written = set().union(set(), *(roots(a.value) for a in args))
    if isinstance(call.func, cst.Attribute):
        written |= roots(call.func.value)
    return written, f"`{code(call.func)}(...)` is not known to leave its arguments unchanged"


def operand_written(site: cst.CSTNode, parents, t, modules: Modules, known_methods: frozenset[str]) -> Optional[str]:
    """Why a call that takes ``site``'s value directly (as receiver or argument, in the same
    statement) may update it in place, or None: ``(x if c else y).add_(1)``, ``self.act(...)``."""
    child, cur = site, parents(site)
    while cur is not None and not isinstance(cur, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        if isinstance(cur, cst.Call) and child is not cur.func:
            _, why = call_writes(cur, t, modules, known_methods)
            if why:
                return why
        if isinstance(cur, cst.Attribute) and cur.value is child:
            call = parents(cur)
            if isinstance(call, cst.Call) and call.func is cur:
                _, why = call_writes(call, t, modules, known_methods)
                if why:
                    return why
        if isinstance(cur, (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)):
            return None  # an operator made a new tensor: nothing past it reaches the selected one
        child, cur = cur, parents(cur)
    return None


def _elements(v: cst.CSTNode) -> list[cst.CSTNode]:
    if isinstance(v, (cst.Tuple, cst.List)):
        return [e.value for e in v.elements]
    return [v]


def alias_roots(expr: cst.CSTNode, t, known_fresh: frozenset[str], modules: Optional[Modules] = None) -> set[str]:
    """The names whose tensors ``expr``'s value may be, view, or contain.

    ``known_fresh`` are tensor methods that return a new tensor (the vetted pure list less the
    alias list); anything else may return its receiver or an argument."""
    if isinstance(expr, cst.Name):
        return set() if expr.value in ("None", "True", "False") else {expr.value}
    if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                         cst.FormattedString, cst.Ellipsis)):
        return set()
    if isinstance(expr, (cst.Attribute, cst.Subscript)):
        base = expr.value
        while isinstance(base, (cst.Attribute, cst.Subscript)):
            base = base.value  # `x.unbind(0)[0]`: a part of what the call may alias
        return roots(expr) | (alias_roots(base, t, known_fresh, modules) if isinstance(base, cst.Call) else set())
    if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        return set().union(set(), *(alias_roots(e.value, t, known_fresh) for e in expr.elements))
    if isinstance(expr, cst.Dict):
        return set().union(set(), *(alias_roots(e.value, t, known_fresh) for e in expr.elements if hasattr(e, "value")))
    if isinstance(expr, cst.IfExp):
        return alias_roots(expr.body, t, known_fresh) | alias_roots(expr.orelse, t, known_fresh)
    if isinstance(expr, cst.BooleanOperation):
        return alias_roots(expr.left, t, known_fresh) | alias_roots(expr.right, t, known_fresh)
    if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)):
        return set()  # an operator on tensors makes a new tensor
    if isinstance(expr, cst.Call):
        kind, name = _callee_kind(expr, t)
        recv = roots(expr.func.value) if isinstance(expr.func, cst.Attribute) else set()
        arg_roots = set().union(set(), *(alias_roots(a.value, t, known_fresh) for a in expr.args))
        if _inplace_flag(expr) or name.endswith("_"):
            return (recv if kind == "method" else set()) | arg_roots
        own = _is_self_module(expr)
        if modules is not None and own is not None and own in modules.fresh:
            return set()
        if kind == "method":
            if name in ALIAS_METHODS:
                return alias_roots(expr.func.value, t, known_fresh)  # type: ignore[union-attr]
            if name in known_fresh:
                return set()
            return alias_roots(expr.func.value, t, known_fresh) | arg_roots  # type: ignore[union-attr]
        if kind in ("torch", "F"):
            if name in ALIAS_FUNCS:
                first = [a.value for a in expr.args if a.keyword is None]
                return alias_roots(first[0], t, known_fresh) if first else arg_roots
            if name in known_fresh:
                return set()
            return arg_roots
        if kind == "other" and name in ("len", "isinstance", "hasattr", "int", "float", "bool", "str", "repr"):
            return set()
        return recv | arg_roots
    if isinstance(expr, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.Lambda)):
        return {n.value for n in iter_tree(expr) if isinstance(n, cst.Name)}  # may hold what it reads
    return set()


def grad_sources(expr: cst.CSTNode, t, scalars: frozenset[str] = frozenset()) -> Optional[frozenset[str]]:
    """The names and attribute chains (``x``, ``self.weight``) a gradient may flow back to from
    ``expr``'s value, or None when that cannot be told (an unknown call, a dtype conversion to
    an unknown dtype). ``scalars`` are names and attribute chains that never carry a gradient
    (Python numbers, ``self.<buffer>``)."""
    if isinstance(expr, cst.Name):
        if expr.value in ("None", "True", "False") or expr.value in scalars:
            return frozenset()
        return frozenset((expr.value,))
    if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)):
        return frozenset()
    if isinstance(expr, cst.Attribute):
        if expr.attr.value in ("shape", "dtype", "ndim", "device", "layout", "is_cuda", "is_sparse", "requires_grad", "data"):
            return frozenset()
        if expr.attr.value in ALIAS_ATTRS:
            return grad_sources(expr.value, t, scalars)
        d = dotted(expr)
        if d in scalars:
            return frozenset()
        return frozenset((d,)) if d else None
    if isinstance(expr, cst.Subscript):
        return grad_sources(expr.value, t, scalars)  # an index never carries a gradient
    if isinstance(expr, cst.Comparison):
        return frozenset()
    if isinstance(expr, cst.UnaryOperation):
        if isinstance(expr.operator, (cst.Minus, cst.Plus)):
            return grad_sources(expr.expression, t, scalars)
        return frozenset()  # `not`, `~`: a bool
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
            return frozenset()
        if isinstance(expr.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.MatrixMultiply, cst.Power)):
            left, right = grad_sources(expr.left, t, scalars), grad_sources(expr.right, t, scalars)
            return None if left is None or right is None else left | right
        return None
    if isinstance(expr, (cst.Tuple, cst.List)):
        parts = [grad_sources(e.value, t, scalars) for e in expr.elements]
        return None if any(p is None for p in parts) else frozenset().union(*parts)  # type: ignore[arg-type]
    if isinstance(expr, cst.Call):
        kind, name = t.func(expr.func)
        if any(a.keyword is not None and a.keyword.value == "requires_grad" for a in expr.args):
            return None
        if kind == "other":
            return None
        if name in NO_GRAD_FUNCS:
            return frozenset()
        operands: list[cst.CSTNode] = []
        if kind == "method":
            operands.append(expr.func.value)  # type: ignore[union-attr]
        if name in ("to", "type") and kind == "method":
            dtypes = [dotted(a.value).split(".")[-1] for a in expr.args]
            if not dtypes or not all(d in _FLOAT_DTYPES for d in dtypes):
                return None  # an integer or unknown dtype: the result may not require grad
        elif name not in GRAD_FUNCS:
            return None
        skip = _NO_GRAD_ARG.get(name)
        positional = 0
        for a in expr.args:
            if a.keyword is None and not a.star:
                if positional == skip:
                    positional += 1
                    continue
                positional += 1
            if a.keyword is not None and a.keyword.value in ("mask", "condition", "dim", "dtype"):
                continue
            operands.append(a.value)
        parts = [grad_sources(o, t, scalars) for o in operands]
        return None if any(p is None for p in parts) else frozenset().union(*parts)  # type: ignore[arg-type]
    return None


def may_overflow(expr: cst.CSTNode, t) -> bool:
    """Whether ``expr`` computes something that may be inf for finite operands: a product, a
    power, an exponential, a large literal. Plain names (inputs, earlier values) are taken as
    finite."""
    for node in iter_tree(expr):
        if isinstance(node, cst.BinaryOperation) and isinstance(
                node.operator, (cst.Multiply, cst.MatrixMultiply, cst.Power, cst.Divide, cst.LeftShift)):
            return True
        if isinstance(node, (cst.Integer, cst.Float)):
            try:
                if abs(float(node.evaluated_value)) >= LARGE_LITERAL:
                    return True
            except (ValueError, OverflowError):
                return True
        if isinstance(node, cst.Call):
            _, name = t.func(node.func)
            if name in PRODUCT_FUNCS or name in MAGNIFYING_FUNCS or name in NON_FINITE_FUNCS or name == "div":
                return True
    return False


def _skip_walk(node: cst.CSTNode, skip: cst.CSTNode) -> Iterator[cst.CSTNode]:
    if node is skip:
        return
    yield node
    for c in node.children:
        yield from _skip_walk(c, skip)


def alias_classes(func: cst.FunctionDef, t, known_fresh: frozenset[str], modules: Optional[Modules] = None) -> dict[str, set[str]]:
    """For each name in ``func``, the names that may share a tensor with it (transitively):
    ``y = x.float()``, ``a, b = x.chunk(2)``, ``for h in hs``, ``cache.append(x)``, ``self.h = x``."""
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(names: set[str]) -> None:
        names = set(names)
        if len(names) < 2:
            for n in names:
                find(n)
            return
        first, *rest = sorted(names)
        for n in rest:
            parent[find(n)] = find(first)

    def target_names(target: cst.CSTNode) -> set[str]:
        if isinstance(target, (cst.Tuple, cst.List)):
            return set().union(set(), *(target_names(e.value) for e in target.elements))
        if isinstance(target, cst.StarredElement):
            return target_names(target.value)
        return roots(target)

    for n in iter_tree(func):
        if isinstance(n, cst.Assign):
            union(set().union(*(target_names(tg.target) for tg in n.targets)) | alias_roots(n.value, t, known_fresh, modules))
        elif isinstance(n, (cst.AnnAssign, cst.AugAssign)) and n.value is not None:
            union(target_names(n.target) | alias_roots(n.value, t, known_fresh, modules))
        elif isinstance(n, (cst.For, cst.CompFor)):
            union(target_names(n.target) | alias_roots(n.iter, t, known_fresh, modules))
        elif isinstance(n, cst.WithItem) and n.asname is not None:
            union(target_names(n.asname.name) | alias_roots(n.item, t, known_fresh, modules))
        elif isinstance(n, cst.NamedExpr):
            union(target_names(n.target) | alias_roots(n.value, t, known_fresh, modules))
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute):
            kind, name = t.func(n.func)
            if kind == "method" and name not in known_fresh and name not in ALIAS_METHODS:
                # an unknown method may keep its arguments (``cache.append(x)``)
                union(roots(n.func.value) | set().union(set(), *(alias_roots(a.value, t, known_fresh) for a in n.args)))
    classes: dict[str, set[str]] = {}
    for name in parent:
        classes.setdefault(find(name), set()).add(name)
    return {name: classes[find(name)] for name in parent}


def later_write(func: cst.FunctionDef, site: cst.CSTNode, positions, names: set[str], t,
                known_fresh: frozenset[str], modules: Modules, rebound: frozenset[str] = frozenset()) -> Optional[str]:
    """Why a tensor that ``names`` may share could be written after ``site`` runs, or None.

    "After" is later in the function's text, or anywhere in a loop around the site (its next
    iteration). The site's own subtree is not looked at. A rewrite that replaces the value of
    such a name by a new tensor (``torch.where``) would make that write miss the tensor the
    original program updated (the caller's argument, a buffer, another alias).

    ``rebound``: names the site binds to a new tensor that no later statement binds again
    (``_later.rebound``); a write through one of them reaches that new tensor, not what the name
    held before, so it does not count (a write through another alias of the old tensor does).
    """
    if not names:
        return None
    classes = alias_classes(func, t, known_fresh, modules)
    shared = set(names).union(*(classes.get(n, set()) for n in names))
    site_end = (positions[site].end.line, positions[site].end.column)
    loop_range = None
    for node in iter_tree(func.body):
        if isinstance(node, (cst.For, cst.While)) and any(d is site for d in iter_tree(node)):
            p = positions[node]
            loop_range = ((p.start.line, p.start.column), (p.end.line, p.end.column))
    for node in _skip_walk(func.body, site):
        p = positions[node]
        start = (p.start.line, p.start.column)
        if not (start >= site_end or (loop_range is not None and loop_range[0] <= start <= loop_range[1])):
            continue
        written, why = _node_writes(node, t, modules, known_fresh)
        hit = (written & shared) - rebound
        if hit:
            return f"{why} at line {p.start.line}, and `{sorted(hit)[0]}` may share its tensor with `{sorted(names)[0]}`"
    return None


def _node_writes(node: cst.CSTNode, t, modules: Modules, known_fresh: frozenset[str]) -> tuple[set[str], str]:
    if isinstance(node, cst.Call):
        return call_writes(node, t, modules, known_fresh | frozenset(ALIAS_METHODS))
    if isinstance(node, cst.AugAssign):
        if isinstance(node.value, (cst.Tuple, cst.List)):
            return set(), ""  # `outputs += (h,)`: a new tuple (or a longer list), no tensor written
        return roots(node.target), f"`{code(node)}` may update `{code(node.target)}` in place"
    if isinstance(node, cst.AssignTarget) and isinstance(node.target, (cst.Subscript, cst.Attribute)):
        return roots(node.target), f"`{code(node.target)} = ...` writes into `{code(node.target.value)}`"
    return set(), ""


def reaching_fresh(func: cst.FunctionDef, site: cst.CSTNode, name: str, parents, t, known_fresh: frozenset[str],
                   modules: Modules, depth: int = 0) -> bool:
    """Whether ``name`` provably holds a tensor made inside this function when ``site`` runs:
    its last assignment before ``site`` (:func:`reaching_value`) is a new tensor (``x * 2``,
    ``self.norm(h)`` with a vetted module), or a name that itself does. A parameter, a name
    assigned in a branch or loop, or an alias is not."""
    if depth > 6:
        return False
    found = reaching_value(func, site, name, parents)
    if found is None:
        return False
    point, bound = found
    if not alias_roots(bound, t, known_fresh, modules):
        return True
    if isinstance(bound, cst.Name):
        return reaching_fresh(func, point, bound.value, parents, t, known_fresh, modules, depth + 1)
    return False


def reaching_value(func: cst.FunctionDef, site: cst.CSTNode, name: str,
                   parents) -> Optional[tuple[cst.BaseSmallStatement, cst.BaseExpression]]:
    """(the assignment, its value) that last binds ``name`` before ``site`` runs, when that is a
    plain ``name = value`` in straight-line code: the earlier statements of the same line and
    block, then of the blocks around it. None for a parameter, or where the binding that reaches
    is not one such assignment: one in a branch, a loop (an earlier iteration), the body of a
    ``try`` or loop before its handler or ``else``, an unpacking, an augmented assignment."""
    stmt, cur = site, parents(site)
    while cur is not None and cur is not func:
        if isinstance(cur, (cst.IndentedBlock, cst.Module, cst.SimpleStatementLine)):
            body = list(cur.body)
            idx = next((i for i, s in enumerate(body) if s is stmt), None)
            for prev in reversed(body[:idx] if idx is not None else []):
                found = _binds_in(prev, name)
                if found is not None:
                    return found or None
            if isinstance(parents(cur), (cst.For, cst.While)):
                return None  # a loop body: the previous iteration may have bound it otherwise
        if isinstance(cur, (cst.Try, cst.TryStar, cst.For, cst.While)) and stmt is not cur.body \
                and any(isinstance(n, cst.Name) and n.value == name for n in _targets_of(cur)):
            return None  # a handler, `else` or `finally`: the body before it may have bound the name
        stmt, cur = cur, parents(cur)
    return None


def _binds_in(stmt: cst.CSTNode, name: str):
    """(the assignment, the value) where ``stmt`` last binds ``name`` by a plain assignment; None
    where it does not bind it; False where it may, in a way not analysed."""
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in reversed(stmt.body):
            found = _binds_in(small, name)
            if found is not None:
                return found
        return None
    if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name) \
            and stmt.targets[0].target.value == name:
        return stmt, stmt.value
    if any(isinstance(n, cst.Name) and n.value == name for n in _targets_of(stmt)):
        return False
    return None


def _targets_of(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    for n in iter_tree(node):
        if isinstance(n, cst.AssignTarget):
            yield from iter_tree(n.target)
        elif isinstance(n, (cst.AnnAssign, cst.AugAssign)):
            yield from iter_tree(n.target)
        elif isinstance(n, (cst.For, cst.CompFor)):
            yield from iter_tree(n.target)
        elif isinstance(n, cst.AsName):
            yield from iter_tree(n.name)
        elif isinstance(n, cst.NamedExpr):
            yield from iter_tree(n.target)
        elif isinstance(n, (cst.FunctionDef, cst.ClassDef)):
            yield n.name


def escapes_after(func: cst.FunctionDef, site: cst.CSTNode, positions, names: set[str], t,
                  known_fresh: frozenset[str]) -> Optional[str]:
    """Why a tensor ``names`` may share leaves the function after ``site`` (returned, yielded,
    stored in an attribute or a container), where a caller may rely on it being the same object."""
    classes = alias_classes(func, t, known_fresh)
    shared = set(names).union(*(classes.get(n, set()) for n in names))
    site_end = (positions[site].end.line, positions[site].end.column)
    for node in _skip_walk(func.body, site):
        p = positions[node]
        if (p.start.line, p.start.column) < site_end:
            continue
        value = None
        if isinstance(node, (cst.Return, cst.Yield)) and node.value is not None:
            value = node.value
        elif isinstance(node, cst.Assign) and any(isinstance(tg.target, (cst.Attribute, cst.Subscript)) for tg in node.targets):
            value = node.value
        if value is not None:
            # what the stored or returned value may be (``y + 1`` is a new tensor, ``(y,)`` holds y)
            hit = alias_roots(value, t, known_fresh) & shared
            if hit:
                return f"`{sorted(hit)[0]}` leaves the function at line {p.start.line}"
        elif isinstance(node, cst.Call):
            # handed to something that may keep it: ``cache.append(y)`` (a caller's list),
            # ``keep(y)``, an unknown method; torch functions, vetted tensor methods, in-place
            # updates (they copy values) and pure builtins do not
            hit = set().union(set(), *(alias_roots(a.value, t, known_fresh) for a in node.args)) & shared
            kind, name = _callee_kind(node, t)
            keeps = (kind == "method" and (name in KEEPING_METHODS or (name not in known_fresh and not name.endswith("_")
                                                                        and name not in CONTAINER_METHODS))) \
                or (kind == "other" and name not in NON_WRITING_BUILTINS)
            if hit and keeps:
                return f"`{sorted(hit)[0]}` is handed to `{code(node.func)}(...)` at line {p.start.line}, which may keep it"
    return None
