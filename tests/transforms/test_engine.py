"""The engine: applying whole-line edits, resolving overlaps, atomic multi-edit fixes,
import insertion, suppression, routing, bad input. Rules here are tiny test doubles."""

from __future__ import annotations

import libcst as cst
import pytest

from graphmend.model import Category, Decline, Edit, Fix, GraphBreak, Safety
from graphmend.transforms.base import RuleContext, SourceError, SourceFile, Transform, diff_edits, iter_nodes
from graphmend.transforms.engine import (
    EditConflict,
    apply_edits,
    choose_fixes,
    fix_bytes,
    fix_text,
    route_breaks,
)

UNSAFE = RuleContext(threshold=Safety.UNSAFE)


def _fix(rule, line, edits, safety=Safety.SAFE):
    return Fix(rule=rule, title="t", safety=safety, edits=tuple(edits), file="m.py", line=line)


def _edit(start, end, new, old=""):
    return Edit("m.py", start, end, new, old)


TEXT = "a\nb\nc\nd\ne\n"


def test_apply_edits_replace_insert_delete_bottom_up():
    out = apply_edits(TEXT, [_edit(2, 2, "B\n", "b\n"), _edit(4, 3, "x\ny\n"), _edit(5, 5, "", "e\n")])
    assert out == "a\nB\nc\nx\ny\nd\n"


def test_apply_edits_refuses_stale_edit():
    with pytest.raises(EditConflict):
        apply_edits(TEXT, [_edit(2, 2, "B\n", "not b\n")])


def test_apply_edits_keeps_missing_final_newline():
    assert apply_edits("a\nb", [_edit(1, 1, "A\n", "a\n")]) == "A\nb"


def test_overlap_earlier_line_wins_then_rule_code_and_multi_edit_fix_is_atomic():
    first = _fix("GM201", 2, [_edit(2, 3, "X\n", "b\nc\n")])
    # a two-place fix (helper at the top + the site) overlapping the first at line 3: skipped whole
    second = _fix("GM101", 3, [_edit(1, 0, "helper\n"), _edit(3, 3, "C\n", "c\n")])
    other = _fix("GM301", 5, [_edit(5, 5, "E\n", "e\n")])
    accepted, skipped = choose_fixes([other, second, first], Safety.SAFE)
    assert accepted == [first, other]
    assert [s.fix for s in skipped] == [second] and "overlaps the GM201 fix at line 2" in skipped[0].reason
    assert apply_edits(TEXT, [e for f in accepted for e in f.edits]) == "a\nX\nd\nE\n"
    # same line: the lower rule code goes first, deterministically
    a = _fix("GM101", 2, [_edit(2, 2, "1\n", "b\n")])
    b = _fix("GM201", 2, [_edit(2, 2, "2\n", "b\n")])
    assert choose_fixes([b, a], Safety.SAFE)[0] == [a] == choose_fixes([a, b], Safety.SAFE)[0]


def test_identical_import_insertions_are_merged_not_conflicts():
    imp = _edit(1, 0, "import torch\n")
    f1 = _fix("GM101", 2, [imp, _edit(2, 2, "B\n", "b\n")])
    f2 = _fix("GM101", 4, [imp, _edit(4, 4, "D\n", "d\n")])
    accepted, skipped = choose_fixes([f1, f2], Safety.SAFE)
    assert accepted == [f1, f2] and not skipped
    assert apply_edits(TEXT, [e for f in accepted for e in f.edits]) == "import torch\na\nB\nc\nD\ne\n"


def test_safety_threshold_and_display_only():
    unsafe = _fix("GM101", 1, [_edit(1, 1, "A\n", "a\n")], Safety.UNSAFE)
    shown = _fix("GM102", 2, [_edit(2, 2, "B\n", "b\n")], Safety.DISPLAY_ONLY)
    accepted, skipped = choose_fixes([unsafe, shown], Safety.SAFE)
    assert accepted == [] and {s.reason.split(":")[0] for s in skipped} == {"unsafe fix", "display-only"}
    accepted, _ = choose_fixes([unsafe, shown], Safety.UNSAFE)
    assert accepted == [unsafe]


def test_diff_edits_are_minimal_whole_lines():
    assert diff_edits("m.py", TEXT, "a\nB\nc\nd\ne\nf\n") == (
        Edit("m.py", 2, 2, "B\n", "b\n"),
        Edit("m.py", 6, 5, "f\n", ""),
    )


class _Doubler(Transform):
    """A test double: rewrites `x = <int>` to twice the number, with `import torch` added."""

    code = "GM999"
    name = "doubler"
    summary = "test"
    categories = (Category.OTHER,)

    def sites(self, source):
        return [n for n in iter_nodes(source.module, (cst.SimpleStatementLine,))
                if isinstance(n.body[0], cst.Assign) and isinstance(n.body[0].value, cst.Integer)]

    def rewrite(self, node, source, ctx):
        value = int(node.body[0].value.value)
        if value == 7:
            return self.decline(source, node, "seven is lucky")
        if value == 13:
            raise RuntimeError("a bug in the rule")
        new = node.with_changes(body=[node.body[0].with_changes(value=cst.Integer(str(value * 2 + 1000)))])
        tree = source.with_import(source.replace(source.module, node, new))
        return source.fix_from(tree, rule=self.code, title="double", safety=Safety.SAFE, site=node)

    def prefilter(self, text):
        return True


def test_rule_outcomes_import_once_comments_kept_and_failures_are_values():
    text = '"""doc."""\nimport os\n\n# about x\nx = 1  # trailing\ny = 7\nz = 13\nw = 2  # graphmend: ignore[GM9]\n'
    result = fix_text("m.py", text, UNSAFE, [_Doubler()])
    assert result.text == ('"""doc."""\nimport os\nimport torch\n\n# about x\nx = 1002  # trailing\ny = 7\nz = 13\n'
                           'w = 2  # graphmend: ignore[GM9]\n')
    assert [d.reason for d in result.declined] == ["seven is lucky"]
    assert [f.error for f in result.failed] == ["RuntimeError: a bug in the rule"]
    assert [(s.rule, s.line) for s in result.suppressed] == [("GM999", 8)]
    again = fix_text("m.py", result.text, UNSAFE, [_Doubler()])
    assert again.text.count("import torch") == 1


def test_dynamic_mode_only_looks_at_routed_lines():
    text = "x = 1\ny = 2\n"
    result = fix_text("m.py", text, UNSAFE, [_Doubler()], {"GM999": {2}})
    assert result.text == "import torch\nx = 1\ny = 1004\n"
    assert fix_text("m.py", text, UNSAFE, [_Doubler()], {"GM999": set()}).text == text


def test_select_and_ignore_prefixes():
    ctx = RuleContext(select=("GM",), ignore=("GM9",))
    assert not ctx.selects("GM999") and ctx.selects("GM101")
    assert RuleContext(select=("GM1",), ignore=()).selects("GM101")
    assert not RuleContext(select=("GM2",)).selects("GM101")
    assert RuleContext(select=("GM999",), ignore=("GM9",)).selects("GM999")  # the longer prefix wins
    assert fix_text("m.py", "x = 1\n", ctx, [_Doubler()]).text == "x = 1\n"


def test_route_breaks_by_rule_then_category():
    from graphmend.transforms.registry import all_rules

    rules = all_rules()
    breaks = [
        GraphBreak("m.py", 3, "r", Category.DATA_DEPENDENT_BRANCH),
        GraphBreak("m.py", 9, "r", Category.SKIPPED_FRAME, rule="GM101"),
        GraphBreak("m.py", 12, "r", Category.DYNAMIC_SHAPE),
    ]
    routed = route_breaks(breaks, rules)
    assert routed["GM101"] == {3, 9}
    for rule in rules:  # a break naming no rule goes to the rules of its category only
        assert (12 in routed[rule.code]) == (Category.DYNAMIC_SHAPE in rule.categories)


@pytest.mark.parametrize("data, cause", [(b"x = 1\x00\n", "binary"), (b"x = '\xff'\n", "not UTF-8"),
                                         (b"def f(:\n", "syntax error")])
def test_bad_input_is_an_error_result_and_untouched(data, cause):
    result = fix_bytes("bad.py", data, UNSAFE, [_Doubler()])
    assert result.error and cause in result.error and result.error.startswith("bad.py")
    assert not result.changed and not result.applied


def test_source_error_is_one_line():
    with pytest.raises(SourceError) as info:
        SourceFile("m.py", "if x\n")
    assert "\n" not in str(info.value) and str(info.value).startswith("m.py:")


def test_decline_is_a_value_with_location():
    d = _Doubler().run(SourceFile("m.py", "a = 7\n"), UNSAFE)[0]
    assert isinstance(d, Decline) and (d.rule, d.file, d.line) == ("GM999", "m.py", 1) and d.fingerprint
