"""GM101: the must-decline suite, the shapes it accepts, and numeric checks of its rewrites."""

from __future__ import annotations

import textwrap

import pytest
import torch

from graphmend.model import Decline, Fix, Safety
from graphmend.transforms.base import RuleContext, SourceFile
from graphmend.transforms.data_dependent_branch import DataDependentBranch
from graphmend.transforms.engine import fix_text

RULE = DataDependentBranch()
STATIC = RuleContext(threshold=Safety.UNSAFE)
DYNAMIC = RuleContext(threshold=Safety.UNSAFE, verified=True)


def _src(body: str) -> str:
    return "import torch\nimport torch.nn.functional as F\n\n" + textwrap.dedent(body).lstrip("\n")


def _outcomes(text: str, *, dynamic: bool):
    source = SourceFile("m.py", text)
    if dynamic:
        # Dynamo reports the line of the `if`: give the rule every `if` line, as the fix loop would.
        lines = [i + 1 for i, line in enumerate(text.splitlines()) if line.lstrip().startswith("if ")]
        return RULE.run(source, DYNAMIC, lines)
    return RULE.run(source, STATIC, None)


# Programs where a torch.where rewrite would change behaviour; each with a piece of the reason.
MUST_DECLINE = {
    "print in the branch": ("""
        def f(x):
            if x.sum() > 0:
                print("positive")
            return x
        """, 'print("positive")` for its effect'),
    "in-place op in the branch": ("""
        def f(x):
            y = x
            if x.sum() > 0:
                y = x.add_(1)
            return y
        """, "in place (`.add_()`)"),
    "augmented assignment": ("""
        def f(x):
            if x.sum() > 0:
                x += 1
            return x
        """, "`x += 1` may update a tensor in place"),
    "attribute write": ("""
        def f(self, x):
            if x.sum() > 0:
                self.count = self.count + 1
            return x
        """, "writes the attribute `self.count`"),
    "buffer rebinding": ("""
        def f(self, x):
            if (x > 0).any():
                self.running = x.mean()
            return x
        """, "writes the attribute `self.running`"),
    "subscript write": ("""
        def f(x):
            if x.sum() > 0:
                x[0] = 0
            return x
        """, "writes into `x[0]` in place"),
    "call valid only under its predicate (computed index)": ("""
        def f(x, idx):
            y = x
            if (idx < x.shape[0]).all():
                y = x[idx]
            return y
        """, "computed index"),
    "item predicate": ("""
        def f(x):
            if x.sum().item() > 0:
                x = x * 2
            return x
        """, "`.item()`"),
    "tolist predicate": ("""
        def f(x):
            if x.tolist()[0] > 0:
                x = x * 2
            return x
        """, "`.tolist()`"),
    "torch.equal predicate": ("""
        def f(x, y):
            if torch.equal(x, y):
                x = x * 2
            return x
        """, "`equal()`"),
    "allclose predicate": ("""
        def f(x, y):
            if torch.allclose(x, y):
                x = x * 2
            return x
        """, "`allclose()`"),
    "None arm": ("""
        def f(x):
            if x.sum() > 0:
                y = None
            else:
                y = x * 2
            return y
        """, "None in one branch"),
    "different dtypes": ("""
        def f(x):
            if x.sum() > 0:
                y = x.half()
            else:
                y = x.bfloat16()
            return y
        """, "dtype bfloat16 in one branch and float16"),
    "different shapes": ("""
        def f(x):
            if x.sum() > 0:
                y = x.sum()
            else:
                y = x
            return y
        """, "different shape in each branch"),
    "aliasing then in-place update": ("""
        def f(x):
            if x.sum() > 0:
                y = x
            else:
                y = x * 2
            y.mul_(2)
            return y
        """, "updates a tensor in place"),
    "random draw": ("""
        def f(x):
            if x.sum() > 0:
                x = x + torch.rand_like(x)
            return x
        """, "draws random numbers"),
    "dropout": ("""
        def f(self, x):
            if (x > 0).all():
                x = F.dropout(x, p=0.1, training=self.training)
            return x
        """, "draws random numbers"),
    "integer division": ("""
        def f(x, n):
            if x.sum() > 0:
                x = x // n
            return x
        """, "integer division"),
    "division with rounding_mode": ("""
        def f(x, n):
            if x.sum() > 0:
                x = torch.div(x, n, rounding_mode="floor")
            return x
        """, "integer division"),
    "break inside the branch": ("""
        def f(xs):
            for x in xs:
                if (x > 0).all():
                    break
            return xs
        """, "`break` inside the branch"),
    "continue inside the branch": ("""
        def f(xs):
            out = []
            for x in xs:
                if (x > 0).all():
                    continue
                out.append(x)
            return out
        """, "`continue` inside the branch"),
    "return in only one branch": ("""
        def f(x):
            if x.sum() > 0:
                return x
            y = x * 2
            return y
        """, "is not followed by a `return`"),
    "raise in the branch": ("""
        def f(x):
            if (x < 0).any():
                raise ValueError("negative")
            return x
        """, "`raise` inside the branch"),
    "unknown function": ("""
        def f(x):
            if x.sum() > 0:
                x = helper(x)
            return x
        """, "calls helper()"),
    "submodule call in one branch": ("""
        def f(self, x):
            if x.sum() > 0:
                x = self.proj(x)
            return x
        """, "self.proj()"),
    "Python number in one branch": ("""
        def f(x):
            if x.sum() > 0:
                y = 0
            else:
                y = x
            return y
        """, "Python value `0`"),
    "name unbound on the other path": ("""
        def f(x):
            if x.sum() > 0:
                y = x * 2
            return y
        """, "not bound before the `if`"),
    "loop inside the branch": ("""
        def f(x):
            if x.sum() > 0:
                for _ in range(3):
                    x = x * 2
            return x
        """, "compound statement"),
    "yield in the branch": ("""
        def f(x):
            if x.sum() > 0:
                yield x
            return x
        """, "suspends the function"),
    "assert in the branch": ("""
        def f(x):
            if x.sum() > 0:
                assert x.shape[0] > 1
            return x
        """, "`assert` inside the branch"),
    "setup read before assigned in a loop": ("""
        def f(xs, x):
            acc = x
            for t in xs:
                if t.sum() > 0:
                    acc = acc + scale
                    scale = t.mean()
            return acc
        """, "follows a selected assignment"),
    "name bound only on the branch's own path": ("""
        def f(x):
            if x.sum() > 0:
                z = x * 3
            if (x > 1).any():
                y = z * 2
            else:
                y = x
            return y
        """, "`z` may be unbound where its branch is not taken"),
    "global target": ("""
        def f(x):
            global state
            if x.sum() > 0:
                state = x * 2
            return x
        """, "declared global/nonlocal"),
    "a Python bool conjunct": ("""
        def f(x, clip: bool):
            if clip and (x > 3).any():
                x = x.clamp(max=3)
            return x
        """, "cannot show that `clip` is a tensor"),
}


def test_must_decline_suite_is_large_enough():
    assert len(MUST_DECLINE) >= 20


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("case", sorted(MUST_DECLINE))
def test_must_decline(case, dynamic):
    body, reason = MUST_DECLINE[case]
    text = _src(body)
    outcomes = _outcomes(text, dynamic=dynamic)
    assert not any(isinstance(o, Fix) for o in outcomes), [o for o in outcomes if isinstance(o, Fix)]
    declines = [o for o in outcomes if isinstance(o, Decline)]
    if not dynamic and not declines:
        # Static mode skips conditions that do not evidently involve a tensor: no rewrite,
        # and that is the behaviour under test (nothing may change).
        assert fix_text("m.py", text, STATIC, [RULE]).text == text
        return
    assert declines, outcomes
    assert any(reason in d.reason for d in declines), [d.reason for d in declines]
    assert fix_text("m.py", text, DYNAMIC if dynamic else STATIC, [RULE],
                    {"GM101": range(1, 100)} if dynamic else None).text == text


# --------------------------------------------------------------------------------------------
# The accepted shapes, run numerically


def _load(text: str, name: str = "f"):
    ns: dict = {}
    exec(compile(text, "<gm101>", "exec"), ns)
    return ns[name]


def _fixed(text: str, *, dynamic: bool = False) -> str:
    result = fix_text("m.py", text, DYNAMIC if dynamic else STATIC, [RULE],
                      {"GM101": range(1, 200)} if dynamic else None)
    assert result.applied, ([d.reason for d in result.declined], result.failed)
    return result.text


def test_whole_tensor_clamp_keeps_a_0d_condition():
    text = _src("""
        def f(residual, h):
            h = residual + h
            if h.dtype == torch.float16 and (torch.isinf(h).any() or torch.isnan(h).any()):
                clamp_value = torch.finfo(h.dtype).max - 1000
                h = torch.clamp(h, min=-clamp_value, max=clamp_value)
            return h
        """)
    new = _fixed(text)
    assert "torch.isinf(h).any() | torch.isnan(h).any()" in new
    assert "torch.where(torch.isinf(h) |" not in new  # never element-wise
    # the static conjunct stays a Python if, with the layout guard; the original `if` is its elif
    assert "if h.dtype == torch.float16 and _graphmend_strided(h):" in new
    assert "elif h.dtype == torch.float16 and (torch.isinf(h).any() or torch.isnan(h).any()):" in new
    before, after = _load(text), _load(new)
    big = torch.full((2, 3), 60000.0, dtype=torch.float16)
    with_inf = big.clone()
    with_inf[0, 0] = float("inf")  # one inf: the WHOLE tensor is clamped, the 60000s too
    for h in (big, with_inf, big.float(), torch.zeros(3, dtype=torch.float16)):
        zero = torch.zeros_like(h)
        torch.testing.assert_close(after(zero, h), before(zero, h), rtol=0, atol=0, equal_nan=True)
        assert after(zero, h).dtype == before(zero, h).dtype


def test_elif_chain_to_nested_selects_numerically_equal():
    text = _src("""
        def f(x):
            if x.max() > 2:
                y = x * 3
            elif x.max() > 1:
                y = x * 2
            else:
                y = x - 1
            return y
        """)
    new = _fixed(text)
    body = new.split("def f")[1]
    # x * 3 and x - 1 are alike only if x is not a bool tensor: the checked select is used
    # (on ordinary strided tensors; the original chain follows as the guard's elif)
    assert ("    if _graphmend_strided(x):\n"
            "        y = _graphmend_select(x.max() > 2, x * 3, _graphmend_select(x.max() > 1, x * 2, x - 1))\n"
            "    elif x.max() > 2:\n") in body
    before, after = _load(text), _load(new)
    for scale in (0.5, 1.5, 2.5):
        x = torch.rand(4) * 0 + scale
        assert torch.equal(after(x), before(x))


def test_multiple_targets_bind_the_condition_once():
    # The second select must not see the first one's new `x` in its condition.
    text = _src("""
        @torch.no_grad()
        def f(x, y):
            if (x > 0).all():
                x = x - 10
                y = y + x
            return torch.stack([x, y])
        """)
    new = _fixed(text)
    assert "_gm_cond = (x > 0).all()" in new
    before, after = _load(text), _load(new)
    for x in (torch.ones(3), -torch.ones(3)):
        y = torch.arange(3.0)
        for a, b in zip(after(x, y), before(x, y)):
            assert torch.equal(a, b)


def test_nan_prone_branch_is_declined_where_gradients_may_flow():
    text = _src("""
        def f(x):
            if (x > 0).all():
                x = torch.log(x)
            return x
        """)
    outcomes = _outcomes(text, dynamic=False)
    assert not any(isinstance(o, Fix) for o in outcomes)
    assert any("0 * inf = NaN" in o.reason for o in outcomes if isinstance(o, Decline))
    # the forced rewrite would be wrong: equal values, NaN gradient from the unselected arm
    x = torch.tensor([0.0, 2.0], requires_grad=True)
    torch.where((x > 0).all(), torch.log(x), x).sum().backward()
    assert torch.isnan(x.grad).any()


@pytest.mark.parametrize("body", [
    "if (x > 0).all():\n        x = torch.softmax(x, -1)",
    "if (x > 0).all():\n        x = x.logsumexp(-1, keepdim=True) + x",
    "if (x > 0).all():\n        x = torch.hypot(x, x)",
    "if (x > 0).all():\n        x = F.log_softmax(x, -1)",
])
def test_more_non_finite_arms_are_declined(body):
    text = _src(f"def f(x):\n    {body}\n    return x\n")
    outcomes = _outcomes(text, dynamic=False)
    assert not any(isinstance(o, Fix) for o in outcomes)


def test_nan_prone_branch_under_no_grad_is_rewritten():
    text = _src("""
        @torch.no_grad()
        def f(x):
            if (x > 0).all():
                x = torch.log(x)
            return x + 1
        """)
    new = _fixed(text)
    x = torch.tensor([-1.0, 2.0])
    assert torch.equal(_load(new)(x), _load(text)(x))


def test_suppression_comment_is_honoured():
    text = _src("""
        def f(x):
            if x.sum() > 0:  # graphmend: ignore[GM101]
                x = x * 2
            return x
        """)
    result = fix_text("m.py", text, STATIC, [RULE])
    assert result.text == text and result.suppressed and not result.applied


def test_import_torch_added_when_missing():
    text = "def f(x):\n    if (x > 0).any():\n        x = x * 2\n    return x + 1\n"
    source = SourceFile("m.py", text)
    # no `torch` in the file, so the cheap prefilter skips it; the rule itself still adds the import
    fix = RULE.rewrite(next(iter(RULE.sites(source))), source, STATIC)
    assert isinstance(fix, Fix)
    from graphmend.transforms.engine import apply_fix_list

    new = apply_fix_list(text, [fix])
    assert new.startswith("import torch\n") and "_graphmend_select((x > 0).any(), x * 2, x)" in new
    assert _load(new)(torch.tensor([1.0, -1.0])).tolist() == [3.0, -1.0]


def test_static_mode_ignores_python_conditions_and_dynamic_trusts_dynamo():
    text = _src("""
        def f(x):
            if x > 0:
                x = x * 2
            return x + 1
        """)
    assert fix_text("m.py", text, STATIC, [RULE]).text == text  # cannot tell x is a tensor
    new = _fixed(text, dynamic=True)  # Dynamo said this `if` is on a tensor
    assert "_graphmend_select(_graphmend_truth(x > 0), x * 2, x)" in new
    before, after = _load(text), _load(new)
    for v in (-1.0, 2.0):
        assert torch.equal(after(torch.tensor(v)), before(torch.tensor(v)))
    with pytest.raises(RuntimeError):  # a many-element condition still raises, never broadcasts
        after(torch.ones(3))


def test_branch_that_may_raise_for_other_shapes_is_unsafe():
    # x > y raises when the shapes do not broadcast; the original only evaluated it when
    # its branch was taken.
    text = _src("""
        @torch.no_grad()
        def f(x, y):
            if (x > 0).all():
                return torch.tanh(x)
            return torch.where(x > y, x, y)
        """)
    fixes = [o for o in _outcomes(text, dynamic=True) if isinstance(o, Fix)]
    assert fixes and fixes[0].safety is Safety.UNSAFE and "may raise for some shapes" in fixes[0].notes
    assert fix_text("m.py", text, RuleContext(threshold=Safety.SAFE, verified=True), [RULE], {"GM101": [5]}).text == text


def test_checked_select_falls_back_to_the_if_when_shapes_differ():
    kept = _src("""
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("long", torch.ones(3))
                self.register_buffer("short", torch.ones(1, 3))  # broadcasting would turn a [3] into a [1, 3]

            @torch.no_grad()
            def forward(self, x):
                if (x > 0).all():
                    t = self.long
                else:
                    t = self.short
                return t
        """)
    # the buffers' reads cannot raise and the helper checks shapes, but the original returns the
    # module's own tensor (a caller may update it in place); the select returns a new one
    (declined,) = _outcomes(kept, dynamic=True)
    assert isinstance(declined, Decline) and "`t` leaves the function" in declined.reason, declined
    text = kept.replace("t = self.long", "t = self.long * 2").replace("t = self.short", "t = self.short * 3")
    new = _fixed(text, dynamic=True)
    assert "_graphmend_select((x > 0).all(), self.long * 2, self.short * 3)" in new

    before, after = _load(text, "M")(), _load(new, "M")()
    for x in (torch.ones(2), -torch.ones(2)):
        assert after(x).shape == before(x).shape
        assert torch.equal(after(x), before(x))
    after.short = torch.ones(3)
    torch._dynamo.reset()
    compiled = torch.compile(after, backend="eager", fullgraph=True)  # alike: one graph
    assert torch.equal(compiled(-torch.ones(2)), torch.full((3,), 3.0))


def test_loop_variable_is_bound_for_the_else_less_update():
    text = _src("""
        def f(xs):
            out = []
            for x in xs:
                if (x > 0).all():
                    x = x.masked_fill(x > 1, 1.0)
                out.append(x + 1)
            return out
        """)
    new = _fixed(text)
    assert "x = torch.where((x > 0).all(), x.masked_fill(x > 1, 1.0), x)" in new
    xs = [torch.tensor([0.5, 2.0]), torch.tensor([-1.0, 3.0])]
    assert [t.tolist() for t in _load(new)(xs)] == [t.tolist() for t in _load(text)(xs)]
