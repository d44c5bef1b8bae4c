"""Lines are numbered as Python numbers them, everywhere: Python's tokenizer ends a line only at
``\\n``, ``\\r\\n`` or ``\\r``, while ``str.splitlines`` also breaks at ``\\v``, ``\\f``,
``\\x1c``-``\\x1e``, U+0085, U+2028 and U+2029, which may stand in a string or a comment. And a
file's own line ending and UTF-8 byte-order mark survive a fix: generated lines (a helper, an
import, the runtime's two lines) end the way the file's lines end."""

from __future__ import annotations

import ast

import pytest

from bot.diff import PullDiff, parse_patch
from bot.review import Edit as BotEdit
from bot.review import Finding, FixProposal, Verification
from bot.suggest import SUGGESTION, apply_line_edits, plan_deliveries
from graphmend.config import Config
from graphmend.detect.static import detect_static
from graphmend.model import Safety
from graphmend.sources import split_lines
from graphmend.transforms.base import RuleContext
from graphmend.transforms.engine import fix_text

ODD = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]

MODEL = '''\
import torch


class M(torch.nn.Module):
    def forward(self, x):
        s = "a{c}b"  # a note{c}that goes on
        h = x * 2
        if h.sum() > 0:
            h = h * 2
        else:
            h = h - 1
        print("h", s)
        return h


def run(x):
    return torch.compile(M())(x)
'''
IF_LINE, PRINT_LINE = 8, 12  # as Python numbers them, whatever stands in line 6
UNSAFE = RuleContext(threshold=Safety.UNSAFE)


def python_line(text: str, line: int) -> str:
    """Line ``line`` of ``text`` as Python's tokenizer sees it (``ast`` positions)."""
    node = next(n for n in ast.walk(ast.parse(text)) if getattr(n, "lineno", None) == line)
    return ast.get_source_segment(text, node, padded=True)


@pytest.mark.parametrize("char", ODD, ids=[f"U+{ord(c):04X}" for c in ODD])
def test_check_numbers_lines_as_python_does(tmp_path, char):
    text = MODEL.format(c=char)
    (tmp_path / "m.py").write_text(text, encoding="utf-8", newline="")
    result = detect_static(Config(root=tmp_path.resolve()))
    found = {(b.line, b.rule): b.source_line for b in result.breaks}
    assert set(found) >= {(IF_LINE, "GM101"), (PRINT_LINE, "GM201")}, found
    assert found[(IF_LINE, "GM101")] == "if h.sum() > 0:"
    assert found[(PRINT_LINE, "GM201")] == 'print("h", s)'
    # a suppression comment is read on the line it stands on
    (tmp_path / "m.py").write_text(text.replace("if h.sum() > 0:", "if h.sum() > 0:  # graphmend: ignore[GM101]"),
                                   encoding="utf-8", newline="")
    assert IF_LINE not in {b.line for b in detect_static(Config(root=tmp_path.resolve())).breaks if b.rule == "GM101"}


@pytest.mark.parametrize("char", ["\x0c", "\u2028"], ids=["U+000C", "U+2028"])
def test_a_dynamic_break_is_suppressed_by_the_comment_on_its_own_line(tmp_path, char):
    from graphmend.check import _without_suppressed
    from graphmend.model import Category, GraphBreak, TargetResult

    text = MODEL.format(c=char).replace("if h.sum() > 0:", "if h.sum() > 0:  # graphmend: ignore[GM101]")
    (tmp_path / "m.py").write_text(text, encoding="utf-8", newline="")
    found = [GraphBreak("m.py", line, "Data-dependent branching", Category.DATA_DEPENDENT_BRANCH, rule=rule)
             for line, rule in ((IF_LINE, "GM101"), (PRINT_LINE, "GM201"))]
    kept = _without_suppressed(tmp_path, TargetResult("t", 2, 2, tuple(found)))
    assert [(b.line, b.rule) for b in kept.breaks] == [(PRINT_LINE, "GM201")]


@pytest.mark.parametrize("char", ODD, ids=[f"U+{ord(c):04X}" for c in ODD])
def test_fix_and_its_suggestions_edit_python_s_lines_and_keep_the_rest(char):
    text = MODEL.format(c=char)
    result = fix_text("m.py", text, UNSAFE)
    assert result.failed == () and {f.rule for f in result.applied} == {"GM101", "GM201"}, (result.failed, result.declined)
    ast.parse(result.text)
    lines = split_lines(text)
    edits = [e for f in result.applied for e in f.edits]
    for e in edits:  # every range is Python's: what it replaces is what stands there
        assert "".join(lines[e.start_line - 1 : e.end_line]) == e.old_text
    gm101 = next(f for f in result.applied if f.rule == "GM101")
    # the layout guard takes the `if` line; the original `if` stays below it as the `elif`
    assert [(e.start_line, e.end_line) for e in gm101.edits if e.old_text] == [(IF_LINE, IF_LINE)]
    assert python_line(text, IF_LINE).startswith("        if h.sum() > 0:")
    # equal except for the edits: the odd line is untouched, and the bot's line edits agree
    assert f'        s = "a{char}b"  # a note{char}that goes on\n' in result.text
    bot_edits = [BotEdit(e.file, e.start_line, e.end_line, e.new_text, e.old_text) for e in edits]
    assert apply_line_edits(text, bot_edits) == result.text

    # The suggestion for GM101 covers Python's lines, in a pull request that adds the whole file
    # (git numbers lines at \n only, as Python does here).
    patch = f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + line for line in lines)
    fix = FixProposal(gm101.rule, gm101.title, "safe", tuple(gm101_edits(gm101)),
                      Verification("passed"))
    finding = Finding("ab" * 10, "introduced", "m.py", gm101.line, "branch", fix=fix)
    [delivery] = plan_deliveries([(finding, fix)], PullDiff((parse_patch("m.py", patch, "added"),)), lambda _: lines).values()
    assert delivery.kind == SUGGESTION
    block = next(b for b in delivery.blocks if b.start == IF_LINE)
    assert (block.end, block.text) == (IF_LINE, "        if _graphmend_strided(h):\n"
                                                "            h = torch.where(h.sum() > 0, h * 2, h - 1)\n"
                                                "        elif h.sum() > 0:\n")


def gm101_edits(fix) -> list[BotEdit]:
    return [BotEdit(e.file, e.start_line, e.end_line, e.new_text, e.old_text) for e in fix.edits]


CRLF_MODEL = MODEL.format(c="").replace("\n", "\r\n")


def test_a_crlf_file_keeps_crlf_in_every_generated_line():
    result = fix_text("m.py", CRLF_MODEL, UNSAFE)
    assert {f.rule for f in result.applied} == {"GM101", "GM201"}, (result.failed, result.declined)
    ends = {line[len(line.rstrip("\r\n")):] for line in split_lines(result.text)}
    assert ends == {"\r\n"}, ends
    assert "torch.where(h.sum() > 0" in result.text and "graphmend runtime" in result.text


def test_fix_keeps_a_byte_order_mark_and_crlf_on_disk(tmp_path):
    # In a package: the print's fix imports the runtime module it writes beside the package.
    from graphmend.cli import main

    (tmp_path / "graphmend.yml").write_text("paths: ['.']\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    target = tmp_path / "pkg" / "m.py"
    target.write_bytes(b"\xef\xbb\xbf" + CRLF_MODEL.encode("utf-8"))
    assert main(["fix", "--root", str(tmp_path), "--static", "--unsafe-fixes", "--no-verify"]) in (0, 1)
    data = target.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and data.count(b"\xef\xbb\xbf") == 1
    text = data[3:].decode("utf-8")
    assert "torch.where(h.sum() > 0" in text and "import _graphmend_install  # noqa: E402\r\n_graphmend_install(globals())\r\n" in text
    assert {line[len(line.rstrip("\r\n")):] for line in split_lines(text)} == {"\r\n"}
    ast.parse(text)
    assert (tmp_path / "pkg" / "_graphmend_runtime.py").is_file()


def test_the_trees_verify_and_pr_use_read_a_crlf_file_with_a_byte_order_mark_as_written(tmp_path):
    from graphmend.model import Edit, Fix
    from graphmend.pr import _stale_edit
    from graphmend.trees import apply_edits_to_tree

    (tmp_path / "m.py").write_bytes(b"\xef\xbb\xbfa = 1\r\nb = 2\r\nc = 3\r\n")
    edits = [Edit("m.py", 2, 1, "x = 0\r\n"), Edit("m.py", 3, 3, "c = 4\r\n", "c = 3\r\n")]
    assert _stale_edit(tmp_path, Fix("GM101", "t", Safety.SAFE, tuple(edits), "m.py", 3)) == ""
    apply_edits_to_tree(tmp_path, edits)
    assert (tmp_path / "m.py").read_bytes() == b"\xef\xbb\xbfa = 1\r\nx = 0\r\nb = 2\r\nc = 4\r\n"
