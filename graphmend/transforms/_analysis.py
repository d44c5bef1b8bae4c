"""Static facts about Python expressions that the rewrite rules need to prove legality.

Everything here answers a narrow question conservatively: "may evaluating this expression,
on a path where the original program would NOT have evaluated it, raise, write state, draw
random numbers, or need a graph break itself?" When unsure, the answer is "yes, and here is
why" (a reason string). The lists are whitelists on purpose: an unknown call is refused.

The reasoning behind "shape errors are fine": a Python ``if`` on a tensor always branches on
one element, so which arm runs depends on tensor *values*; shapes and dtypes are the same on
both paths. An operation whose validity depends only on shapes and dtypes (``matmul``,
``reshape``, ``torch.finfo``) is therefore valid off-predicate exactly when it is valid on
it. Operations whose validity depends on values (indexing with a computed index, integer
division, ``.item()``) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence

import libcst as cst

from graphmend.transforms import _dtypes as D
from graphmend.transforms import _effects as E
from graphmend.transforms._effects import ALIAS_FUNCS, ALIAS_METHODS, NON_FINITE_FUNCS, PRODUCT_FUNCS, code, dotted, may_overflow  # noqa: F401

# torch.* / F.* functions that neither raise on values, nor mutate, nor draw random numbers.
PURE_TORCH_FUNCS = frozenset("""
abs absolute neg negative exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan tanh
sigmoid relu erf erfc sign sgn floor ceil round trunc frac reciprocal square pow clamp clip
clamp_min clamp_max maximum minimum fmax fmin where lerp add sub subtract mul multiply
true_divide isinf isnan isfinite isposinf isneginf isreal nan_to_num logical_and logical_or
logical_not logical_xor eq ne gt ge lt le greater less greater_equal less_equal any all sum
mean prod amax amin max min norm std var logsumexp softmax log_softmax cumsum matmul mm bmm
einsum cat concat concatenate stack transpose permute reshape flatten squeeze unsqueeze
zeros_like ones_like full_like zeros ones full finfo iinfo tensor as_tensor masked_fill
baddbmm addmm outer tril triu diag roll flip movedim swapaxes broadcast_to expand_copy
t bitwise_and bitwise_or bitwise_not bitwise_xor signbit heaviside hypot atan2 arctan2
""".split())

# Ops whose value or gradient may be inf/NaN where the arm was not meant to run:
# where(c, a, b) back-propagates 0 * grad(a), and 0 * inf = NaN (vetted in _effects).
NAN_PRONE = frozenset(NON_FINITE_FUNCS)

PURE_F_FUNCS = frozenset("""
relu relu6 gelu silu mish sigmoid tanh softmax log_softmax softmin layer_norm group_norm
rms_norm linear pad normalize softplus softsign elu selu celu leaky_relu hardtanh hardswish
hardsigmoid glu logsigmoid tanhshrink softshrink hardshrink threshold
""".split())

# Calls that draw random numbers (they shift the generator even when the result is unused).
RANDOM_FUNCS = frozenset("""
rand randn randint rand_like randn_like randint_like randperm bernoulli multinomial normal
poisson dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout
gumbel_softmax rrelu uniform_ normal_ exponential_ geometric_ log_normal_ cauchy_ random_
""".split())

# Tensor methods that are pure and cannot raise on values.
PURE_METHODS = frozenset("""
abs neg exp log log1p sqrt rsqrt sigmoid tanh relu sign floor ceil round trunc reciprocal
square pow clamp clip clamp_min clamp_max maximum minimum add sub mul true_divide isinf isnan
isfinite nan_to_num logical_and logical_or logical_not eq ne gt ge lt le any all sum mean
prod amax amin max min norm std var logsumexp softmax log_softmax cumsum matmul mm bmm
transpose permute reshape flatten squeeze unsqueeze view view_as expand expand_as
contiguous clone detach float half double bfloat16 int long bool short to type_as size dim
numel masked_fill repeat new_zeros new_ones new_full new_tensor chunk split unbind
is_floating_point is_complex t tril triu roll flip movedim bitwise_and bitwise_or
bitwise_not where type cpu
""".split())

# What returns a new tensor (never its receiver or an argument): the pure lists less the
# views and no-op conversions, which may hand back the very tensor they were given.
FRESH = (PURE_METHODS | PURE_TORCH_FUNCS | PURE_F_FUNCS) - frozenset(ALIAS_METHODS) - frozenset(ALIAS_FUNCS)

# Reductions over the whole tensor (no arguments) give a 0-d result.
WHOLE_REDUCTIONS = frozenset("sum mean prod amax amin max min norm std var logsumexp".split())
BOOL_REDUCTIONS = frozenset(("any", "all"))
BOOL_ELEMENTWISE = frozenset("isinf isnan isfinite isposinf isneginf logical_not signbit".split())

# Calls that are themselves a graph break (a Python value read from a tensor).
SCALAR_READS = frozenset(("item", "tolist", "numpy", "__bool__", "__int__", "__float__"))
SCALAR_FUNCS = frozenset(("equal", "allclose", "is_nonzero"))

# Attributes that only describe a tensor (static under Dynamo's guards).
STATIC_ATTRS = frozenset("dtype shape ndim device is_cuda is_floating_point training requires_grad layout is_sparse".split())
STATIC_METHODS = frozenset("dim size numel is_floating_point is_complex element_size".split())
VIEW_ATTRS = frozenset(("T", "mT", "H", "mH", "real", "imag", "data"))
RANK_ATTRS = frozenset(("T", "mT", "H", "mH"))  # valid (without a warning) for some ranks only
DTYPE_NAMES = frozenset(
    "float16 half bfloat16 float32 float float64 double int8 int16 int32 int64 long int short bool uint8 complex64".split()
)


def names_in(node: cst.CSTNode, skip: Sequence[Optional[cst.CSTNode]] = ()) -> set[str]:
    """Every plain name read or written inside ``node`` (attribute names excluded), except
    inside the nodes in ``skip`` (compared by identity)."""
    found: set[str] = set()

    def walk(n: cst.CSTNode) -> None:
        if any(n is s for s in skip):
            return
        if isinstance(n, cst.Name):
            found.add(n.value)
            return
        if isinstance(n, cst.Attribute):
            walk(n.value)
            return
        for child in n.children:
            walk(child)

    walk(node)
    return found


@dataclass
class Effects:
    """What evaluating an expression off-predicate may do; empty ``problems`` = harmless."""

    problems: list[str] = field(default_factory=list)
    nan_prone: list[str] = field(default_factory=list)
    # Judges an attribute chain (``_reads.Reads.why``): why reading it may raise or run code.
    reads: Optional[Callable[[cst.Attribute], Optional[str]]] = None
    # Names known to hold Python numbers (finite ones: setups such as ``torch.finfo(..).max - 1000``).
    scalars: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        return not self.problems


class _Torch:
    """Which names mean ``torch`` and ``torch.nn.functional`` in this file."""

    def __init__(self, torch_names: frozenset[str] = frozenset({"torch"}), f_names: frozenset[str] = frozenset({"F"})):
        self.torch_names = torch_names
        self.f_names = f_names

    def func(self, callee: cst.CSTNode) -> tuple[str, str]:
        """('torch', name) / ('F', name) / ('method', name) / ('other', dotted)."""
        d = dotted(callee)
        if d:
            parts = d.split(".")
            if len(parts) == 2 and parts[0] in self.torch_names:
                return "torch", parts[1]
            if len(parts) == 2 and parts[0] in self.f_names:
                return "F", parts[1]
            if len(parts) == 4 and parts[0] in self.torch_names and parts[1:3] == ["nn", "functional"]:
                return "F", parts[3]
            if len(parts) == 3 and parts[0] in self.torch_names and parts[1] == "special":
                return "torch", parts[2]
        if isinstance(callee, cst.Attribute):
            return "method", callee.attr.value
        return "other", d or code(callee)


def torch_names_of(module: cst.Module) -> _Torch:
    torch_names, f_names = set(), set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for a in small.names:
                    n = dotted(a.name)
                    if n == "torch" or (n.startswith("torch.") and a.asname is None):
                        torch_names.add(a.asname.name.value if a.asname else "torch")  # type: ignore[union-attr]
                    if n == "torch.nn.functional" and a.asname:
                        f_names.add(a.asname.name.value)  # type: ignore[union-attr]
            elif isinstance(small, cst.ImportFrom) and small.module is not None:
                if dotted(small.module) == "torch.nn" and not isinstance(small.names, cst.ImportStar):
                    for a in small.names:
                        if dotted(a.name) == "functional":
                            f_names.add(a.asname.name.value if a.asname else "functional")  # type: ignore[union-attr]
    return _Torch(frozenset(torch_names or {"torch"}), frozenset(f_names))


def effects(expr: cst.CSTNode, torch: _Torch,
            reads: Optional[Callable[[cst.Attribute], Optional[str]]] = None,
            scalars: frozenset[str] = frozenset()) -> Effects:
    """Check that evaluating ``expr`` when the original would not have is harmless. Without
    ``reads`` an attribute read counts as harmless; with it, every chain is judged by it.
    ``nan_prone`` lists what may be inf/NaN in value or gradient where the arm is not selected:
    an op on the non-finite list, or an op off the finite-gradient list applied to a value not
    proven finite (an argument may hold ``-inf`` from an additive mask, or NaN)."""
    eff = Effects(reads=reads, scalars=scalars)
    _walk(expr, torch, eff)
    return eff


def _walk(node: cst.CSTNode, t: _Torch, eff: Effects) -> None:  # noqa: C901 - one case per node type
    shown = code(node)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    if isinstance(node, (cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)):
        if isinstance(node, cst.Name) and node.value == "None":
            return
        return
    if isinstance(node, cst.Attribute):
        if eff.reads is not None:
            why = eff.reads(node)
            if why:
                eff.problems.append(why)
                return
        base = node.value
        while isinstance(base, cst.Attribute):  # the chain is judged whole, not each prefix
            base = base.value
        _walk(base, t, eff)
        return
    if isinstance(node, cst.UnaryOperation):
        if isinstance(node.operator, cst.Not):
            eff.problems.append(f"`{shown}` takes the truth value of a value, which breaks the graph on a tensor")
            return
        _walk(node.expression, t, eff)
        return
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, (cst.FloorDivide, cst.Modulo)):
            eff.problems.append(f"`{shown}` is an integer division, which may raise ZeroDivisionError where the branch was not taken")
            return
        if isinstance(node.operator, cst.Divide):
            eff.nan_prone.append(shown)
        if isinstance(node.operator, cst.Power):
            eff.nan_prone.append(shown)
        if isinstance(node.operator, (cst.Multiply, cst.MatrixMultiply)):
            _overflowing_product([node.left, node.right], shown, t, eff)
        _walk(node.left, t, eff)
        _walk(node.right, t, eff)
        return
    if isinstance(node, cst.Comparison):
        _walk(node.left, t, eff)
        for c in node.comparisons:
            _walk(c.comparator, t, eff)
        return
    if isinstance(node, cst.BooleanOperation):
        eff.problems.append(f"`{shown}` uses `and`/`or`, which takes the truth value of a tensor")
        return
    if isinstance(node, (cst.Tuple, cst.List)):
        for el in node.elements:
            if isinstance(el, (cst.StarredElement,)):
                eff.problems.append(f"`{shown}` unpacks an iterable")
                return
            _walk(el.value, t, eff)
        return
    if isinstance(node, cst.Subscript):
        _walk(node.value, t, eff)
        for el in node.slice:
            _check_index(el.slice, shown, t, eff)
        return
    if isinstance(node, cst.Call):
        _walk_call(node, shown, t, eff)
        return
    if isinstance(node, cst.NamedExpr):
        eff.problems.append(f"`{shown}` assigns with `:=`")
        return
    if isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
        eff.problems.append(f"`{shown}` is a lambda or comprehension, which this rule does not analyse")
        return
    if isinstance(node, cst.IfExp):
        eff.problems.append(f"`{shown}` is a conditional expression")
        return
    if isinstance(node, (cst.Await, cst.Yield)):
        eff.problems.append(f"`{shown}` suspends the function")
        return
    eff.problems.append(f"`{shown}` is a {type(node).__name__}, which this rule does not analyse")


def _check_index(index: cst.CSTNode, shown: str, t: _Torch, eff: Effects) -> None:
    if isinstance(index, cst.Index):
        v = index.value
        if _is_constant_index(v):
            return
        eff.problems.append(f"`{shown}` indexes with a computed index, which may be out of range where the branch was not taken")
        return
    if isinstance(index, cst.Slice):
        for part in (index.lower, index.upper, index.step):
            if part is not None and not _is_constant_index(part) and not _is_static_number(part):
                eff.problems.append(f"`{shown}` slices with a computed bound")
                return
        return
    eff.problems.append(f"`{shown}` has an index this rule does not analyse")


def _is_constant_index(v: cst.CSTNode) -> bool:
    if isinstance(v, (cst.Integer, cst.Ellipsis)) or (isinstance(v, cst.Name) and v.value == "None"):
        return True
    if isinstance(v, cst.UnaryOperation) and isinstance(v.operator, cst.Minus) and isinstance(v.expression, cst.Integer):
        return True
    return False


def _is_static_number(v: cst.CSTNode) -> bool:
    """A Python int computed from shapes (``x.shape[1]``, ``x.size(0) // 2``): slicing clamps it."""
    if isinstance(v, cst.Subscript) and isinstance(v.value, cst.Attribute) and v.value.attr.value == "shape":
        return True
    if isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute) and v.func.attr.value in ("size", "dim"):
        return True
    return False


def _overflowing_product(operands: list, shown: str, t: _Torch, eff: Effects) -> None:
    """A product of tensors: the backward of each operand is the zero gradient of the arm not
    taken times the other operands, and 0 * inf is NaN. It is harmless only where every operand
    that may carry a gradient is multiplied by values proven finite (``x * (x > 0)``)."""
    tensors = [o for o in operands if not is_python_scalar(o, t, eff.scalars)]
    for i, o in enumerate(tensors):
        if E.grad_sources(o, t, eff.scalars) == frozenset():
            continue  # no gradient reaches this operand
        if any(may_overflow(p, t) or not finite_value(p, t, eff.scalars) for j, p in enumerate(tensors) if j != i):
            eff.nan_prone.append(shown)
            return


# Ops whose value is finite whatever their operand holds (bools, integers, fresh constants).
_FINITE_VALUED = frozenset("""
isinf isnan isfinite isposinf isneginf isreal signbit logical_and logical_or logical_not logical_xor eq ne gt ge
lt le greater less greater_equal less_equal any all zeros_like ones_like zeros ones long int short byte char bool
argmax argmin
""".split())


def finite_value(expr: cst.CSTNode, t: _Torch, scalars: frozenset[str] = frozenset()) -> bool:
    """Whether ``expr``'s value is proven free of inf and NaN: a small Python number, a
    comparison, a bool or integer result, ``nan_to_num()``. A tensor from anywhere else (an
    argument, an additive ``-inf`` mask, a quotient) may hold either."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return not may_overflow(expr, t)
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False") or expr.value in scalars
    if isinstance(expr, cst.Comparison):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return finite_value(expr.expression, t, scalars)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
        return True
    if isinstance(expr, cst.Call):
        kind, name = t.func(expr.func)
        if name in _FINITE_VALUED and kind in ("method", "torch"):
            return True
        if name == "nan_to_num" and all(a.keyword is None or a.keyword.value == "nan" for a in expr.args) \
                and all(finite_value(a.value, t, scalars) for a in expr.args if a.keyword is not None or kind == "method"):
            return True  # +-inf become the dtype's largest finite values
    return False


def _unproven_operand(node: cst.Call, kind: str, name: str, t: _Torch, eff: Effects) -> bool:
    """An op off the finite-gradient list whose tensor operands are not all proven finite: its
    backward may be NaN where the incoming gradient is zero (``tanh(nan)``, ``square(-inf)``)."""
    if name in E.FINITE_GRAD_FUNCS or name in E.NO_GRAD_FUNCS or name in PRODUCT_FUNCS:
        return False
    operands = [a.value for a in node.args if a.keyword is None and not a.star]
    if kind == "method" and isinstance(node.func, cst.Attribute):
        operands.append(node.func.value)
    return any(not is_python_scalar(o, t, eff.scalars) and not finite_value(o, t, eff.scalars)
               and E.grad_sources(o, t, eff.scalars) != frozenset() for o in operands)


def _walk_call(node: cst.Call, shown: str, t: _Torch, eff: Effects) -> None:
    kind, name = t.func(node.func)
    if name in PRODUCT_FUNCS and kind in ("method", "torch"):
        receiver = [node.func.value] if kind == "method" and isinstance(node.func, cst.Attribute) else []
        _overflowing_product(receiver + [a.value for a in node.args if a.keyword is None and not a.star], shown, t, eff)
    for arg in node.args:
        flag = arg.keyword.value if arg.keyword is not None else ""
        if flag == "out" or (flag == "inplace" and not (isinstance(arg.value, cst.Name) and arg.value.value == "False")):
            eff.problems.append(f"`{shown}` writes a tensor in place (`{flag}=`)")
            return
        if flag == "layout" and dotted(arg.value).split(".")[-1] != "strided":
            eff.problems.append(f"`{shown}` makes a tensor of another layout (`layout=`), on which the operations "
                                "of the branch may have no kernel")
            return
    namespace = dotted(node.func).split(".")
    if len(namespace) > 2 and namespace[0] in t.torch_names and namespace[1] in ("sparse", "nested"):
        eff.problems.append(f"`{shown}` calls torch.{namespace[1]}.{namespace[-1]}, which takes or makes "
                            f"{namespace[1]} tensors and raises on others")
        return
    if name in RANDOM_FUNCS or name.startswith("rand"):
        eff.problems.append(f"`{shown}` draws random numbers; evaluating it on the other path would shift the random generator")
        return
    if kind == "method" and name in SCALAR_READS:
        eff.problems.append(f"`{shown}` reads a Python value from a tensor (`.{name}()`), itself a graph break")
        return
    if kind == "method" and name.endswith("_") and not name.endswith("__"):
        eff.problems.append(f"`{shown}` updates a tensor in place (`.{name}()`)")
        return
    if kind == "torch":
        if name in SCALAR_FUNCS:
            eff.problems.append(f"`{shown}` returns a Python bool (`torch.{name}`), itself a graph break")
            return
        if name not in PURE_TORCH_FUNCS and name != "div":
            eff.problems.append(f"`{shown}` calls torch.{name}, which is not known to be free of side effects and errors")
            return
        if name == "div" and any(a.keyword is not None and a.keyword.value == "rounding_mode" for a in node.args):
            eff.problems.append(f"`{shown}` is an integer division (rounding_mode), which may raise where the branch was not taken")
            return
        if name in NAN_PRONE or name == "div" or _unproven_operand(node, kind, name, t, eff):
            eff.nan_prone.append(shown)
    elif kind == "F":
        if name not in PURE_F_FUNCS:
            eff.problems.append(f"`{shown}` calls F.{name}, which is not known to be free of side effects and errors")
            return
        if name in NAN_PRONE or _unproven_operand(node, kind, name, t, eff):
            eff.nan_prone.append(shown)
    elif kind == "method":
        if name not in PURE_METHODS and name != "div":
            receiver = code(node.func.value) if isinstance(node.func, cst.Attribute) else "?"
            eff.problems.append(
                f"`{shown}` calls {receiver}.{name}(), which may mutate state or raise (only known tensor methods are allowed)"
            )
            return
        if name == "div" and any(a.keyword is not None and a.keyword.value == "rounding_mode" for a in node.args):
            eff.problems.append(f"`{shown}` is an integer division (rounding_mode), which may raise where the branch was not taken")
            return
        if name in NAN_PRONE or name == "div" or _unproven_operand(node, kind, name, t, eff):
            eff.nan_prone.append(shown)
        _walk(node.func.value, t, eff)  # type: ignore[union-attr]
    else:
        if name in ("len", "abs", "isinstance"):
            pass
        else:
            eff.problems.append(f"`{shown}` calls {name}(), which may have side effects or raise")
            return
    for arg in node.args:
        if arg.star:
            eff.problems.append(f"`{shown}` unpacks arguments")
            return
        _walk(arg.value, t, eff)


# ------------------------------------------------------------------------------------------
# Predicates


@dataclass(frozen=True)
class Predicate:
    """A tensor condition rewritten for ``torch.where``.

    ``text`` is the condition as a boolean tensor expression (``and``/``or``/``not`` turned
    into ``&``/``|``/``~``); ``zero_d`` is True when it is evidently 0-d (``.any()``, a
    whole-tensor reduction compared with a number): then ``where`` cannot broadcast the arms.
    """

    text: str
    zero_d: bool
    node: cst.CSTNode
    typed: bool = True  # False: trusted from Dynamo's report, it may be a Python value on another call


class NotATensor(Exception):
    """The expression is not evidently a tensor condition; ``str()`` says why."""


def split_conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``a and (b and c)`` -> [a, b, c]; anything else is one conjunct."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return split_conjuncts(test.left) + split_conjuncts(test.right)
    return [test]


def is_static(expr: cst.CSTNode, t: _Torch) -> bool:
    """A Python-level fact Dynamo treats as a constant: dtype/shape/None/training checks.

    Keeping such a conjunct as a Python ``if`` never changes behaviour, so this may err on
    the side of "not static" (the site is then declined, never mis-rewritten).
    """
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False")
    if isinstance(expr, cst.Attribute):
        if expr.attr.value in STATIC_ATTRS:
            return True
        d = dotted(expr)
        parts = d.split(".")
        return len(parts) == 2 and parts[0] in t.torch_names and parts[1] in DTYPE_NAMES
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return is_static(expr.expression, t)
    if isinstance(expr, cst.BooleanOperation):
        return is_static(expr.left, t) and is_static(expr.right, t)
    if isinstance(expr, cst.Comparison):
        ops = [c.operator for c in expr.comparisons]
        if all(isinstance(o, (cst.Is, cst.IsNot)) for o in ops) and all(
            isinstance(c.comparator, cst.Name) and c.comparator.value == "None" for c in expr.comparisons
        ):
            return isinstance(expr.left, (cst.Name, cst.Attribute))
        return is_static(expr.left, t) and all(is_static(c.comparator, t) for c in expr.comparisons)
    if isinstance(expr, cst.Subscript):
        return is_static(expr.value, t) and all(
            isinstance(e.slice, cst.Index) and _is_constant_index(e.slice.value) for e in expr.slice
        )
    if isinstance(expr, cst.Call):
        kind, name = t.func(expr.func)
        if kind == "method" and name in STATIC_METHODS:
            return all(isinstance(a.value, (cst.Integer, cst.UnaryOperation)) for a in expr.args)
        if kind == "other" and name in ("isinstance", "hasattr", "len", "callable"):
            return all(isinstance(a.value, (cst.Name, cst.Attribute, cst.SimpleString, cst.Tuple)) for a in expr.args)
        return False
    return False


TRUTH_HELPER = "_graphmend_truth"
SELECT_HELPER_NAME = "_graphmend_select"  # data_dependent_branch.SELECT_HELPER
def truth_code(torch_name: str) -> str:
    """The module-level helper ``TRUTH_HELPER``, for a module that imports torch as ``torch_name``."""
    return f'''def {TRUTH_HELPER}(condition):
    """The truth value of a one-element tensor as a 0-d bool tensor, for torch.where.

    `if t:` raises for a tensor of several or no elements; this raises the same error instead
    of letting torch.where broadcast the condition (numel is static under Dynamo). A condition
    that is not a tensor on this call (None, a Python bool or number) is returned as it is, and
    `{SELECT_HELPER_NAME}` then chooses by its truth value as the `if` did. A sparse condition
    (no strided layout; a static check under Dynamo) is decided by `bool()`, exactly as the
    `if` decided it, with the `if`'s own error; so is a meta one (which the `if` cannot decide).
    """
    if not isinstance(condition, {torch_name}.Tensor):
        return condition
    if condition.layout != {torch_name}.strided or condition.device.type == "meta":
        return {torch_name}.tensor(bool(condition), device=condition.device)
    if condition.numel() != 1:
        raise RuntimeError(
            "Boolean value of Tensor with no values is ambiguous"
            if condition.numel() == 0
            else "Boolean value of Tensor with more than one value is ambiguous"
        )
    return condition.reshape(()).bool()
'''


def tensor_predicate(expr: cst.BaseExpression, t: _Torch, *, trusted: bool) -> Predicate:
    """The ``where`` condition for a tensor predicate, or NotATensor with the reason.

    ``trusted`` (dynamic mode: Dynamo reported a data-dependent branch here) accepts a
    condition whose tensor-ness cannot be seen in the source. A condition not evidently 0-d
    goes through ``TRUTH_HELPER`` (``zero_d`` False: the rule adds ``truth_code``), which
    raises what ``if`` raised for a tensor of several or no elements instead of broadcasting.
    """
    _refuse_scalar_reads(expr)
    kind = _kind(expr, t)
    if kind in ("bool0", "num0"):
        text = _bool_text(expr, t)
        return Predicate(text if kind == "bool0" else f"({text}) != 0", True, expr)
    if kind == "bool":
        return Predicate(f"{TRUTH_HELPER}({_bool_text(expr, t)})", False, expr)
    if trusted and kind == "unknown" and not isinstance(expr, (cst.BooleanOperation,)):
        return Predicate(f"{TRUTH_HELPER}({code(expr)})", False, expr, typed=False)
    raise NotATensor(f"cannot show that `{code(expr)}` is a tensor condition")


def _refuse_scalar_reads(expr: cst.CSTNode) -> None:
    for node in _iter(expr):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value in ("item", "tolist"):
                raise NotATensor(
                    f"the condition reads a Python value with `.{node.func.attr.value}()`; that call is the graph break, "
                    "and torch.where cannot take a Python bool"
                )
        if isinstance(node, cst.Call):
            name = dotted(node.func).split(".")[-1]
            if name in SCALAR_FUNCS:
                raise NotATensor(f"the condition calls `{name}()`, which returns a Python bool (itself the graph break)")
            if isinstance(node.func, cst.Name) and node.func.value in ("bool", "float", "int"):
                raise NotATensor(f"the condition converts a tensor with `{node.func.value}()`, which is itself the graph break")


def bool_leaves(expr: cst.CSTNode) -> list[cst.CSTNode]:
    """The operands under ``and``/``or``/``not``/``&``/``|``/``~`` of a condition."""
    if isinstance(expr, cst.BooleanOperation):
        return bool_leaves(expr.left) + bool_leaves(expr.right)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
        return bool_leaves(expr.left) + bool_leaves(expr.right)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Not, cst.BitInvert)):
        return bool_leaves(expr.expression)
    return [expr]


def _iter(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for c in node.children:
        yield from _iter(c)


def _kind(expr: cst.CSTNode, t: _Torch) -> str:  # noqa: C901
    """'bool0' 0-d bool tensor · 'num0' 0-d numeric tensor · 'bool' bool tensor ·
    'tensor' · 'scalar' Python number · 'unknown'."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return "scalar"
    if isinstance(expr, cst.UnaryOperation):
        inner = _kind(expr.expression, t)
        if isinstance(expr.operator, cst.Not):
            return inner if inner in ("bool0", "bool") else "unknown"
        if isinstance(expr.operator, cst.BitInvert):
            return inner if inner in ("bool0", "bool") else "unknown"
        return inner
    if isinstance(expr, cst.BooleanOperation):
        left, right = _kind(expr.left, t), _kind(expr.right, t)
        if left == right == "bool0":
            return "bool0"
        if {left, right} <= {"bool0", "bool"}:
            return "bool"
        return "unknown"
    if isinstance(expr, cst.BinaryOperation):
        left, right = _kind(expr.left, t), _kind(expr.right, t)
        if isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
            if left == right == "bool0":
                return "bool0"
            if {left, right} <= {"bool0", "bool"}:
                return "bool"
            return "unknown"
        if {left, right} <= {"num0", "scalar", "bool0"}:
            return "scalar" if left == right == "scalar" else "num0"
        return "tensor" if {left, right} & {"tensor", "bool", "num0", "bool0"} and "unknown" not in (left, right) else "unknown"
    if isinstance(expr, cst.Comparison):
        kinds = [_kind(expr.left, t)] + [_kind(c.comparator, t) for c in expr.comparisons]
        if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
            return "unknown"
        if len(kinds) == 2 and set(kinds) <= {"num0", "bool0", "scalar"} and set(kinds) & {"num0", "bool0"}:
            return "bool0"
        if len(kinds) == 2 and set(kinds) & {"num0", "bool0", "tensor", "bool"}:
            return "bool"
        return "unknown"
    if isinstance(expr, cst.Call):
        kind, name = t.func(expr.func)
        n_pos = len([a for a in expr.args if a.keyword is None])
        no_dim = not any(a.keyword is not None and a.keyword.value == "dim" for a in expr.args)
        if kind == "method":
            if name in BOOL_REDUCTIONS and not expr.args:
                return "bool0"
            if name in WHOLE_REDUCTIONS and not expr.args:
                return "num0"
            if name in BOOL_ELEMENTWISE:
                return "bool"
            if name in ("abs", "float", "double", "half", "neg", "sqrt", "exp", "log") and not expr.args:
                inner = _kind(expr.func.value, t)  # type: ignore[union-attr]
                return inner if inner in ("num0", "tensor") else "unknown"
        if kind == "torch":
            if name in BOOL_REDUCTIONS and n_pos == 1 and no_dim and len(expr.args) == 1:
                return "bool0"
            if name in WHOLE_REDUCTIONS and n_pos == 1 and len(expr.args) == 1:
                return "num0"
            if name in BOOL_ELEMENTWISE or name in ("logical_and", "logical_or", "logical_xor", "eq", "ne", "gt", "ge", "lt", "le"):
                return "bool"
            if name in PURE_TORCH_FUNCS:
                return "tensor"
        return "unknown"
    return "unknown"


def tensor_kind(expr: cst.CSTNode, t: _Torch) -> str:
    """What ``expr`` evidently is: 'bool0'/'num0'/'bool'/'tensor'/'scalar', or 'unknown'."""
    return _kind(expr, t)


def _bool_text(expr: cst.CSTNode, t: _Torch) -> str:
    """The condition with Python's ``and``/``or``/``not`` as tensor ``&``/``|``/``~``.

    Both operands of ``&``/``|`` are evaluated, unlike ``and``/``or``; the caller has already
    checked they are pure (every operand is a known tensor condition).
    """
    if isinstance(expr, cst.BooleanOperation):
        op = "&" if isinstance(expr.operator, cst.And) else "|"
        return f"{_operand(expr.left, t)} {op} {_operand(expr.right, t)}"
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return f"~{_operand(expr.expression, t)}"
    return code(expr)


def _operand(expr: cst.CSTNode, t: _Torch) -> str:
    text = _bool_text(expr, t)
    if isinstance(expr, (cst.Call, cst.Name, cst.Attribute, cst.Subscript)):
        return text
    return f"({text})"


# ------------------------------------------------------------------------------------------
# Same shape and dtype


# Ops whose result has the shape and dtype of their (first) tensor argument for any dtype,
# when every other argument is a Python scalar.
KEEP_META = frozenset("clamp clip clamp_min clamp_max abs neg negative nan_to_num relu sign floor ceil round trunc clone detach contiguous".split())
# Ops that keep the shape, and the dtype only for floating-point inputs (int -> float32).
KEEP_META_FLOAT = frozenset("tanh sigmoid exp expm1 sqrt rsqrt log log1p sin cos erf reciprocal softmax log_softmax".split())
_REQ_RANK = {"any": 0, "numeric": 1, "real": 2, "float": 3}  # each allows fewer dtypes than the one before


@dataclass(frozen=True)
class Meta:
    """An expression shown to have the shape of tensor ``base``, and its dtype when ``base``'s
    dtype satisfies ``requires`` (any dtype / numeric, not bool / real, int or float / floating point)."""

    base: str
    requires: str = "any"


def _stronger(a: str, b: str) -> str:
    return a if _REQ_RANK[a] >= _REQ_RANK[b] else b


def _call_operands(call: cst.Call, kind: str) -> Optional[tuple[cst.BaseExpression, list[cst.Arg]]]:
    """The tensor a call works on and its other arguments, or None for other calls.

    ``x.f(a)`` (``kind`` "method") and ``torch.f(x, a)`` (``kind`` "torch" or "F") both give
    ``(x, [a])``; ``kind`` is what ``_Torch.func`` says of ``call.func``.
    """
    if kind == "method":
        return call.func.value, list(call.args)  # type: ignore[union-attr]
    if kind in ("torch", "F") and call.args and call.args[0].keyword is None:
        return call.args[0].value, list(call.args[1:])
    return None


def meta(expr: cst.CSTNode, t: _Torch, scalars: frozenset[str] = frozenset()) -> Optional[Meta]:
    """Shape/dtype of ``expr`` relative to one tensor variable, or None when unknown.

    ``scalars`` are names known to hold Python numbers (setup statements such as
    ``clamp_value = torch.finfo(h.dtype).max - 1000``).
    """
    if isinstance(expr, cst.Name):
        return None if expr.value in scalars else Meta(expr.value)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        inner = meta(expr.expression, t, scalars)
        return Meta(inner.base, _stronger(inner.requires, "numeric")) if inner else None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)):
        for tensor_side, other in ((expr.left, expr.right), (expr.right, expr.left)):
            inner = meta(tensor_side, t, scalars)
            if inner is None or not is_python_scalar(other, t, scalars):
                continue
            is_float = isinstance(other, cst.Float) or isinstance(expr.operator, cst.Divide) or not isinstance(other, cst.Integer)
            return Meta(inner.base, _stronger(inner.requires, "float" if is_float else "numeric"))
        return None
    if isinstance(expr, cst.Call):
        kind, name = t.func(expr.func)
        operands = _call_operands(expr, kind)
        if operands is None:
            return None
        receiver, rest = operands
        inner = meta(receiver, t, scalars)
        if inner is None:
            return None
        if name in KEEP_META or name in KEEP_META_FLOAT:
            if name in ("softmax", "log_softmax"):
                ok = all(a.keyword is not None and a.keyword.value == "dim" or isinstance(a.value, (cst.Integer, cst.UnaryOperation)) for a in rest)
            else:
                ok = all(is_python_scalar(a.value, t, scalars) for a in rest)
            if not ok:
                return None
            if name in KEEP_META_FLOAT:
                need = "float"
            elif name in ("clone", "detach", "contiguous"):
                need = "any"
            elif name in ("abs", "absolute"):
                need = "real"  # abs of a complex tensor is real
            elif any(not isinstance(a.value, cst.Integer) and not (isinstance(a.value, cst.UnaryOperation) and isinstance(a.value.expression, cst.Integer)) for a in rest):
                need = "float"  # clamp(int_tensor, max=1.5) is float32; clamp(bool, min=0) is int64
            else:
                need = "numeric"
            return Meta(inner.base, _stronger(inner.requires, need))
        if name == "masked_fill" and len(rest) == 2 and is_python_scalar(rest[1].value, t, scalars):
            # the mask broadcasts to the tensor, and the fill value is cast: shape and dtype kept
            return Meta(inner.base, inner.requires)
        return None
    return None


def is_python_scalar(expr: cst.CSTNode, t: _Torch, scalars: frozenset[str] = frozenset()) -> bool:
    """A Python number: a literal, a name known to hold one, ``torch.finfo(..).max`` and
    arithmetic of those."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in scalars
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return is_python_scalar(expr.expression, t, scalars)
    if isinstance(expr, cst.BinaryOperation) and not isinstance(expr.operator, (cst.MatrixMultiply,)):
        return is_python_scalar(expr.left, t, scalars) and is_python_scalar(expr.right, t, scalars)
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Call):
        kind, name = t.func(expr.value.func)
        return kind == "torch" and name in ("finfo", "iinfo") and expr.attr.value in ("max", "min", "eps", "tiny", "smallest_normal", "resolution")
    return False


def requirement_met(requires: str, known_dtype: Optional[str]) -> bool:
    allowed = {"any": _ALL_CLASSES, "numeric": _ALL_CLASSES - {"bool"}, "real": frozenset(("int", "float")),
               "float": frozenset(("float",))}[requires]
    return dtype_classes_of(known_dtype) <= allowed


# ------------------------------------------------------------------------------------------
# Shape errors off-predicate

# Element-wise ops on one tensor (other arguments Python scalars): no shape can make them fail.
_ELEMENTWISE_ONE = KEEP_META | KEEP_META_FLOAT | frozenset(
    "float half double bfloat16 int long bool short isinf isnan isfinite isposinf isneginf logical_not sign signbit square pow".split()
)
# Whole-tensor reductions that accept any shape, the empty tensor included (max/min do not).
_TOTAL_REDUCTIONS = frozenset("sum mean any all prod norm".split())
_DTYPE_CLASS = {**{d: "float" for d in ("float16", "half", "bfloat16", "float32", "float", "float64", "double", "floating")},
                **{d: "int" for d in ("int8", "int16", "int32", "int64", "long", "int", "short", "uint8")},
                "bool": "bool", "complex64": "complex", "complex128": "complex", "cfloat": "complex", "cdouble": "complex"}
_ALL_CLASSES = frozenset(D.DTYPE_CLASSES)


def dtype_classes_of(known: Optional[str]) -> frozenset[str]:
    """The dtype classes a tensor of known dtype ``known`` (a dtype name, "floating", or
    space-separated class names) may have; every class when nothing is known."""
    if known is None:
        return _ALL_CLASSES
    if known in _DTYPE_CLASS:
        return frozenset((_DTYPE_CLASS[known],))
    parts = frozenset(known.split())
    return parts if parts and parts <= _ALL_CLASSES else _ALL_CLASSES


def _raises(name: str) -> frozenset[str]:
    return frozenset(D.DTYPE_RAISES[name][0].split())


_BOOL_VALUED = BOOL_ELEMENTWISE | BOOL_REDUCTIONS | frozenset(
    "logical_and logical_or logical_xor eq ne gt ge lt le greater less greater_equal less_equal isreal".split())
# Ops whose result has their (first) tensor's dtype. Not among them: `clamp(bool, min=0)` is int64,
# `clamp(int, max=1.5)` float32; `where`, `maximum` promote their values; `x.max(0)[1]` holds indices;
# `x.view(torch.int32)` reinterprets the bits (each handled in `dtype_classes`).
_CLASS_KEEPING = (KEEP_META - {"clamp", "clip", "clamp_min", "clamp_max"}) | frozenset(ALIAS_METHODS) - frozenset(
    D.DTYPE_WARNS) - {"bool", "to", "type", "type_as", "view"} | frozenset(
    "masked_fill amax amin roll flip tril triu repeat zeros_like ones_like".split())
_TO_FLOATING = KEEP_META_FLOAT | frozenset(("mean", "std", "var", "norm"))
_TO_REAL = frozenset(("abs", "absolute", "norm", "std", "var"))  # a complex tensor's is floating point
_PROMOTING = frozenset(("maximum", "minimum", "fmax", "fmin"))


def _cast_class(call: cst.Call, kind: str, name: str, t: _Torch) -> Optional[frozenset[str]]:
    """The class a call converts to (``x.float()``, ``x.to(torch.int64)``, ``x.view(torch.int32)``,
    ``dtype=torch.bool``); None where it does not say (every class where it names a dtype otherwise)."""
    def named(arg: cst.BaseExpression) -> frozenset[str]:
        d = dotted(arg).split(".")
        ok = len(d) == 2 and d[0] in t.torch_names and d[1] in _DTYPE_CLASS
        return frozenset((_DTYPE_CLASS[d[1]],)) if ok else _ALL_CLASSES

    for a in call.args:
        if a.keyword is not None and a.keyword.value == "dtype":
            return named(a.value)
    if kind != "method":
        return None
    if not call.args and name in ("float", "half", "double", "bfloat16"):
        return frozenset(("float",))
    if not call.args and name in ("int", "long", "short", "byte", "char"):
        return frozenset(("int",))
    if not call.args and name == "bool":
        return frozenset(("bool",))
    if name in ("to", "type"):
        return named(call.args[0].value) if len(call.args) == 1 and call.args[0].keyword is None else _ALL_CLASSES
    if name == "view" and not (len(call.args) > 1 or (call.args and isinstance(call.args[0].value, (cst.Integer, cst.Tuple, cst.List)))
                               or (call.args and _negative_integer(call.args[0].value))):
        return _ALL_CLASSES  # `x.view(t)` may reinterpret as dtype `t`
    return None


def _promoted(values: list, t: _Torch, scalars: frozenset[str], of: Callable[[cst.CSTNode], frozenset[str]]) -> frozenset[str]:
    """The classes of what torch's type promotion makes of tensors and Python numbers (``mask + 1``
    is int64, ``i * 0.5`` float32; two tensors: the higher class, within the union)."""
    tensors = [v for v in values if not is_python_scalar(v, t, scalars)]
    numbers = [v for v in values if is_python_scalar(v, t, scalars)]
    found = frozenset().union(*(of(v) for v in tensors))
    if found & {"bool", "int"} and any(_float_number(n) for n in numbers):
        found = found - {"bool", "int"} | {"float"}
    elif found & {"bool", "int"} and not all(_integer_number(n) for n in numbers):
        found |= {"float"}  # a name holding a Python int or float
    if numbers:
        found = found - {"bool"} | ({"int"} if "bool" in found else frozenset())
    return found


def _float_number(expr: cst.CSTNode) -> bool:
    """A Python float written out: a float literal, or arithmetic with one or with ``/``."""
    if isinstance(expr, cst.Float):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return _float_number(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return isinstance(expr.operator, cst.Divide) or _float_number(expr.left) or _float_number(expr.right)
    return False


def _integer_number(expr: cst.CSTNode) -> bool:
    """A Python int literal, or arithmetic of them other than ``/``."""
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return _integer_number(expr.expression)
    if isinstance(expr, cst.BinaryOperation) and not isinstance(expr.operator, cst.Divide):
        return _integer_number(expr.left) and _integer_number(expr.right)
    return False


def dtype_classes(expr: cst.CSTNode, t: _Torch, scalars: frozenset[str], dtypes: dict[str, str],
                  calls: Optional[Callable[[cst.Call], Optional[frozenset[str]]]] = None) -> frozenset[str]:
    """The dtype classes (bool/int/float/complex) ``expr``'s tensor value may have: a superset,
    every class where the source does not tell. ``dtypes`` has what is known of names (a dtype
    name, or classes: ``_dtypes.classes_text``); ``calls`` tells what other calls return
    (``self.lin(x)``: ``_reads.Reads.output_classes``)."""
    def of(e: cst.CSTNode) -> frozenset[str]:
        return dtype_classes(e, t, scalars, dtypes, calls)

    if isinstance(expr, cst.Name):
        return dtype_classes_of(dtypes.get(expr.value))
    if isinstance(expr, cst.Comparison):
        return frozenset(("bool",))
    if isinstance(expr, cst.Subscript):
        return of(expr.value)
    if isinstance(expr, cst.UnaryOperation):
        return of(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        sides = [expr.left, expr.right]
        if isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
            return frozenset().union(*(of(e) for e in sides if not is_python_scalar(e, t, scalars)))
        found = _promoted(sides, t, scalars, of)
        if isinstance(expr.operator, cst.Divide) and found & {"bool", "int"}:
            found |= {"float"}
        return found
    if isinstance(expr, cst.Call):
        kind, name = t.func(expr.func)
        cast = _cast_class(expr, kind, name, t)
        if cast is not None:
            return cast
        if kind != "other" and name in _BOOL_VALUED:
            return frozenset(("bool",))
        made = calls(expr) if calls is not None else None
        if made is not None:
            return made
        operands = _call_operands(expr, kind)
        if operands is None:
            return _ALL_CLASSES
        receiver, rest = operands
        positional = [a.value for a in rest if a.keyword is None and not a.star]
        inner = of(receiver)
        if name in _TO_REAL:
            inner = inner - {"complex"} | ({"float"} if "complex" in inner else frozenset())
        if name in ("sum", "cumsum", "prod"):
            return inner - {"bool"} | ({"int"} if "bool" in inner else frozenset())  # a bool sum is int64
        if name in _TO_FLOATING:
            return inner - {"bool", "int"} | ({"float"} if inner & {"bool", "int", "float"} else frozenset())
        if name in _TO_REAL:
            return inner
        if name in ("clamp", "clip", "clamp_min", "clamp_max"):  # the bounds promote: `clamp(i, max=1.5)` is float
            return _promoted([receiver, *(a.value for a in rest if not a.star)], t, scalars, of)
        if name in _PROMOTING:
            return _promoted([receiver, *positional], t, scalars, of)
        if name == "where":
            # `x.where(c, y)`, `torch.where(c, x, y)`: the two values (the one-argument form gives indices)
            values = [receiver, *positional[1:]] if kind == "method" else positional
            return _promoted(values, t, scalars, of) if len(values) == 2 else _ALL_CLASSES
        if name in ("max", "min"):
            return inner if not rest else _ALL_CLASSES  # `x.max(0)` is (values, indices)
        if name in _CLASS_KEEPING:
            return inner
    return _ALL_CLASSES


# Ops whose result is complex when their operand is: an op after them that raises for a complex
# tensor raises for a complex operand too (``x.sum() > 0``).
_COMPLEX_KEEPING = frozenset("""
sum mean prod cumsum clone detach contiguous view reshape flatten squeeze unsqueeze transpose permute t expand
narrow select neg exp sqrt tanh sigmoid log
""".split())


def dtype_facts(expr: cst.CSTNode, t: _Torch, dtypes: dict[str, str]) -> dict[str, str]:
    """``dtypes`` with what evaluating ``expr`` without an error proves: ``(x > 0).any()`` raises
    for a complex ``x``, so wherever the program gets past it ``x`` is bool, int or float. Only a
    name the raising op takes directly (every class it raises for) or through ops that keep a
    complex tensor complex (``x.sum() > 0``: complex only) is counted. The facts hold for what
    runs after ``expr`` (the selected values, not setups hoisted above the condition)."""
    facts = dict(dtypes)
    for node in E.iter_tree(expr):
        for operand, bad, how in _dtype_needs(node, t):
            direct = True
            while how == "raise" and not isinstance(operand, cst.Name):
                if isinstance(operand, cst.Subscript):
                    operand = operand.value
                elif isinstance(operand, cst.Call) and t.func(operand.func)[1] in _COMPLEX_KEEPING \
                        and _call_operands(operand, t.func(operand.func)[0]) is not None:
                    operand = _call_operands(operand, t.func(operand.func)[0])[0]  # type: ignore[index]
                    direct = False
                else:
                    break
            if how != "raise" or not isinstance(operand, cst.Name):
                continue
            left = dtype_classes_of(facts.get(operand.value)) - (bad if direct else bad & {"complex"})
            if left:  # none left: the op always raises, nothing to learn
                facts[operand.value] = D.classes_text(left)
    return facts


def dtypes_after_setups(facts: dict[str, str], known: dict[str, str], setups: list, t: _Torch,
                        scalars: frozenset[str]) -> dict[str, str]:
    """``facts`` for the selected values once the setups hoisted above the select have run:
    ``setups`` are ``(name, value)`` in order (value None: not a plain assignment). A name bound
    once gets the classes of its value, judged by ``known`` (the setups run before the
    condition, so its facts do not apply); a name bound otherwise loses what was known of it."""
    out, before = dict(facts), dict(known)
    bound = [n for n, _ in setups]
    for name, value in setups:
        if value is None or bound.count(name) > 1:
            out.pop(name, None)
            before.pop(name, None)
            continue
        classes = dtype_classes(value, t, scalars, before)
        out[name] = before[name] = D.classes_text(classes)
    return out


def reaching_dtypes(func: cst.FunctionDef, site: cst.CSTNode, names: set[str], parents, t: _Torch,
                    calls: Optional[Callable[[cst.Call], Optional[frozenset[str]]]] = None,
                    depth: int = 0) -> dict[str, str]:
    """What the assignments that reach ``site`` (``_effects.reaching_value``) show of the dtype
    classes of ``names``: ``h = self.lin(x)`` (``calls``: a Linear's output is float or complex),
    ``m = (x > 0)``, ``y = h.float()``; the names those values read are judged where they are
    assigned, in turn. A parameter, or a name bound otherwise, is left out (every class)."""
    known: dict[str, str] = {}
    for name in sorted(names):
        found = E.reaching_value(func, site, name, parents)
        if found is None:
            continue
        point, value = found
        inner = reaching_dtypes(func, point, names_in(value), parents, t, calls, depth + 1) if depth < 6 else {}
        classes = dtype_classes(value, t, frozenset(), inner, calls)
        if classes != _ALL_CLASSES:
            known[name] = D.classes_text(classes)
    return known


def _negative_integer(expr: cst.CSTNode) -> bool:
    return (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)
            and isinstance(expr.expression, cst.Integer))


_COMPARE_OPS = {cst.GreaterThan: "gt", cst.LessThan: "lt", cst.GreaterThanEqual: "ge", cst.LessThanEqual: "le"}


def _dtype_needs(expr: cst.CSTNode, t: _Torch) -> list[tuple[cst.CSTNode, frozenset[str], str]]:
    """(a tensor operand, the dtype classes it must not have, "raise"/"warn") for each operation of
    ``expr`` itself that raises or warns for some dtypes (the lists in ``_effects``): ``-mask``
    and ``mask - 1`` raise for a bool tensor, ``x.clamp(0)``, ``x > 0`` and ``x.sign()`` for a
    complex one, ``~x`` for a floating-point one, ``x.masked_fill(m, 0)`` for a mask that is not
    bool; ``z.float()`` of a complex tensor warns."""
    def raising(name: str, *operands: cst.CSTNode) -> list:
        return [(o, _raises(name), "raise") for o in operands]

    if isinstance(expr, cst.UnaryOperation):
        if isinstance(expr.operator, cst.Minus):
            return raising("neg", expr.expression)
        if isinstance(expr.operator, cst.BitInvert):
            return raising("bitwise_not", expr.expression)
        return []
    if isinstance(expr, cst.BinaryOperation):
        sides = (expr.left, expr.right)
        if isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
            return raising("bitwise_and", *sides)
        if isinstance(expr.operator, (cst.LeftShift, cst.RightShift)):
            return raising("lshift", expr.left)
        if isinstance(expr.operator, cst.Power) and _negative_integer(expr.right):
            return raising("pow_negative", expr.left)
        if isinstance(expr.operator, cst.Subtract):
            return raising("sub", *sides)
        return []
    if isinstance(expr, cst.Comparison):
        sides = [expr.left] + [c.comparator for c in expr.comparisons]
        if any(type(c.operator) in _COMPARE_OPS for c in expr.comparisons):
            return raising("gt", *sides)
        return []
    if isinstance(expr, cst.Call):
        kind, name = t.func(expr.func)
        operands = _call_operands(expr, kind)
        if operands is None:
            return []
        receiver, rest = operands
        positional = [a.value for a in rest if a.keyword is None and not a.star]
        found = []
        if name in D.DTYPE_RAISES:
            found += raising(name, receiver, *([] if name in ("clamp", "clip", "clamp_min", "clamp_max") else positional))
        if name == "pow" and positional and _negative_integer(positional[0]):
            found += raising("pow_negative", receiver)
        if name == "round" and any(a.keyword is not None and a.keyword.value == "decimals" for a in rest):
            found.append((receiver, frozenset(("bool", "int", "complex")), "raise"))
        if name == "masked_fill" and positional:
            found += raising("masked_fill_mask", positional[0])
        if name == "where" and kind == "method" and positional:
            found += raising("where_condition", positional[0])  # `x.where(c, y)`
        elif name == "where" and positional:
            found += raising("where_condition", receiver)  # `torch.where(c, x, y)`
        if kind == "method" and name in D.DTYPE_WARNS:
            found.append((receiver, frozenset(D.DTYPE_WARNS[name][0].split()), "warn"))
        return found
    return []


def shape_fallible(expr: cst.CSTNode, t: _Torch, scalars: frozenset[str] = frozenset(),
                   dtypes: Optional[dict[str, str]] = None) -> Optional[str]:
    """The first sub-expression whose evaluation may raise for some shapes or dtypes, or None.

    The original program evaluates a branch only on its own path, so a branch whose shapes
    would not broadcast (``x > y`` with a [2] and a [3]) is harmless there; evaluating it on
    the other path too would raise. Only operations that cannot fail for any shape pass.
    """
    dtypes = dtypes or {}
    shown = code(expr)
    for operand, bad, _ in _dtype_needs(expr, t):
        if not is_python_scalar(operand, t, scalars) and dtype_classes(operand, t, scalars, dtypes) & bad:
            return shown
    if isinstance(expr, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
        return None
    if isinstance(expr, cst.Attribute):
        if isinstance(expr.value, cst.Call) and is_python_scalar(expr, t, scalars):
            # torch.finfo(h.dtype).max: a TypeError for integer dtypes unless h is known float
            arg = expr.value.args[0].value if expr.value.args else None
            if isinstance(arg, cst.Attribute) and arg.attr.value == "dtype" and isinstance(arg.value, cst.Name):
                if requirement_met("float", dtypes.get(arg.value.value)):
                    return None
            return shown
        if expr.attr.value in RANK_ATTRS:
            return shown  # `x.mT` raises below 2-D, `x.H` off 2-D; `x.T` warns off 2-D
        return None if isinstance(expr.value, (cst.Name, cst.Attribute)) else shape_fallible(expr.value, t, scalars, dtypes)
    if isinstance(expr, cst.UnaryOperation):
        return shape_fallible(expr.expression, t, scalars, dtypes)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.MatrixMultiply):
        return shown  # `x @ x` raises unless the shapes chain ([2, 3] @ [2, 3])
    if isinstance(expr, (cst.BinaryOperation, cst.Comparison)):
        if isinstance(expr, cst.BinaryOperation):
            sides = [expr.left, expr.right]
        else:
            sides = [expr.left] + [c.comparator for c in expr.comparisons]
        tensors = [s for s in sides if not is_python_scalar(s, t, scalars)]
        for s in sides:
            inner = shape_fallible(s, t, scalars, dtypes)
            if inner:
                return inner
        if len(tensors) > 1:
            metas = [meta(s, t, scalars) for s in tensors]
            if any(m is None for m in metas) or len({m.base for m in metas}) > 1:  # type: ignore[union-attr]
                return shown
        return None
    if isinstance(expr, cst.Call):
        kind, name = t.func(expr.func)
        operands = _call_operands(expr, kind)
        if operands is None:
            return shown
        receiver, rest = operands
        inner = shape_fallible(receiver, t, scalars, dtypes)
        if inner:
            return inner
        if name in _TOTAL_REDUCTIONS and not rest:
            return None
        if name in _ELEMENTWISE_ONE and all(is_python_scalar(a.value, t, scalars) for a in rest):
            return None
        if name in ("clone", "detach", "contiguous") and not rest:
            return None
        if name == "masked_fill" and len(rest) == 2 and is_python_scalar(rest[1].value, t, scalars):
            m, r = _mask_meta(rest[0].value, t, scalars), meta(receiver, t, scalars)
            if m is not None and r is not None and m.base == r.base and not shape_fallible(rest[0].value, t, scalars, dtypes):
                return None
        if name in ("maximum", "minimum", "where", "add", "sub", "mul", "logical_and", "logical_or") and rest:
            others = [a.value for a in rest if a.keyword is None]
            metas = [meta(v, t, scalars) for v in [receiver, *others] if not is_python_scalar(v, t, scalars)]
            if all(m is not None for m in metas) and len({m.base for m in metas}) <= 1:  # type: ignore[union-attr]
                if not any(shape_fallible(v, t, scalars, dtypes) for v in others):
                    return None
        return shown
    return shown


def _mask_meta(expr: cst.CSTNode, t: _Torch, scalars: frozenset[str]) -> Optional[Meta]:
    """The shape of a mask such as ``h > 100`` (a tensor compared with Python numbers)."""
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        sides = [expr.left, expr.comparisons[0].comparator]
        tensors = [s for s in sides if not is_python_scalar(s, t, scalars)]
        if len(tensors) == 1:
            return meta(tensors[0], t, scalars)
    return meta(expr, t, scalars)
