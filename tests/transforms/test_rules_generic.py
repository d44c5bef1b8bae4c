"""Every registered rule, whatever its code: docs, examples as tests, idempotence.

A new rule file gets these tests for free: its VALID programs must stay unchanged, each
INVALID ``before`` must become exactly ``after``, fixing ``after`` again must change nothing,
and its docs must have every fixed section.
"""

from __future__ import annotations

import pytest

from graphmend.model import Safety
from graphmend.transforms.base import DOC_SECTIONS, RuleContext
from graphmend.transforms.engine import fix_text
from graphmend.transforms.registry import all_rules, check_rule

RULES = all_rules()
UNSAFE = RuleContext(threshold=Safety.UNSAFE)


def _ids(rule):
    return rule.code


def _examples(kind):
    out = []
    for rule in RULES:
        items = rule.VALID if kind == "valid" else rule.INVALID
        for i, item in enumerate(items):
            out.append(pytest.param(rule, item, id=f"{rule.code}-{kind}{i}"))
    return out


def test_registry_finds_rules():
    codes = [r.code for r in RULES]
    assert "GM101" in codes
    assert codes == sorted(codes) and len(set(codes)) == len(codes)


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_docs_have_every_section(rule):
    check_rule(type(rule))  # raises on a malformed rule
    for section in DOC_SECTIONS:
        assert rule.docs[section].strip(), f"{rule.code} lacks {section}"
    assert rule.summary and rule.name and rule.categories


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_rule_has_examples(rule):
    assert rule.VALID, f"{rule.code} has no VALID examples"
    assert rule.INVALID, f"{rule.code} has no INVALID examples (a rule 'has a fix' only if an example proves it)"


@pytest.mark.parametrize("rule,program", _examples("valid"))
def test_valid_example_unchanged(rule, program):
    compile(program, "<valid>", "exec")
    result = fix_text("example.py", program, UNSAFE, [rule])
    assert result.error is None and not result.failed, (result.error, result.failed)
    assert result.text == program
    assert not result.applied


@pytest.mark.parametrize("rule,pair", _examples("invalid"))
def test_invalid_example_fixed_exactly(rule, pair):
    before, after = pair
    compile(before, "<before>", "exec")
    compile(after, "<after>", "exec")
    result = fix_text("example.py", before, UNSAFE, [rule])
    assert not result.failed, result.failed
    assert result.text == after, f"got:\n{result.text}\nexpected:\n{after}"
    assert result.applied and all(f.rule == rule.code for f in result.applied)


@pytest.mark.parametrize("rule,pair", _examples("invalid"))
def test_fix_is_idempotent(rule, pair):
    before, after = pair
    once = fix_text("example.py", before, UNSAFE, [rule]).text
    twice = fix_text("example.py", once, UNSAFE, [rule])
    assert twice.text == once
    assert not twice.applied
