"""``iter_nodes`` walks a node's descendants in source order, computing each node's children once."""

from __future__ import annotations

import libcst as cst
from libcst._nodes.base import BaseLeaf

from graphmend.transforms import base
from graphmend.transforms.base import iter_nodes

SOURCE = '''\
import torch


class M(torch.nn.Module):
    def forward(self, x, *, scale=2):
        if (x.sum() > 0) and self.flag:
            x = torch.where(x > 0, x * scale, -x)
        print("x", [a.b(c) for c in x if c], lambda y: y.z)
        return self.lin(x)[0] + helper(x, key=x.t())
'''


def reference(node, kinds):
    out = [node] if isinstance(node, kinds) else []
    for child in node.children:
        out += reference(child, kinds)
    return out


KINDS = [(cst.Name,), (cst.Call, cst.Attribute), (cst.FunctionDef, cst.Lambda, cst.ListComp), (cst.CSTNode,)]


def test_the_same_nodes_in_the_same_order_as_libcsts_children():
    module = cst.parse_module(SOURCE)
    for kinds in KINDS:
        expected = reference(module, kinds)
        assert expected
        for _ in range(2):  # the second walk reads the kept children
            got = list(iter_nodes(module, kinds))
            assert len(got) == len(expected) and all(a is b for a, b in zip(got, expected)), kinds
    fn = next(iter_nodes(module, (cst.FunctionDef,)))
    assert [n.value for n in iter_nodes(fn, (cst.Name,))][:4] == ["forward", "self", "x", "scale"]


def test_children_are_computed_once_per_node(monkeypatch):
    computed = []
    plain = cst.CSTNode.children

    def counting(node):
        computed.append(id(node))
        return plain.fget(node)

    monkeypatch.setattr(cst.CSTNode, "children", property(counting))
    monkeypatch.setattr(base, "_CHILDREN", {})
    module = cst.parse_module(SOURCE)
    everything = list(iter_nodes(module, (cst.CSTNode,)))
    inner = {id(n) for n in everything if not isinstance(n, BaseLeaf)}  # a leaf's children are () as is
    assert len(computed) == len(inner) == len(set(computed))
    list(iter_nodes(module, (cst.Name,)))
    for fn in iter_nodes(module, (cst.FunctionDef,)):
        list(iter_nodes(fn, (cst.Call,)))
    assert len(computed) == len(inner)


def test_the_table_is_bounded_and_stays_right_past_the_bound(monkeypatch):
    monkeypatch.setattr(base, "_CHILDREN", {})
    monkeypatch.setattr(base, "_CHILDREN_MAX", 10)
    module = cst.parse_module(SOURCE)
    for kinds in KINDS:
        expected = reference(module, kinds)
        for _ in range(2):
            got = list(iter_nodes(module, kinds))
            assert len(base._CHILDREN) <= 10
            assert len(got) == len(expected) and all(a is b for a, b in zip(got, expected))
