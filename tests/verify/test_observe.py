"""What a call changes besides its outputs (graphmend.verify.observe), without workers."""

from __future__ import annotations

import torch

from graphmend.verify.observe import changed_state, restore, snapshot, state_owner, state_signature, written_inputs


class Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)
        self.register_buffer("seen", torch.zeros(2))
        self.calls = 0
        self.gen = torch.Generator().manual_seed(3)

    def forward(self, x):
        self.calls += 1
        self.seen.add_(x.sum(0))
        self.last = x.detach().clone()  # a tensor attribute added by the call
        return self.fc(x) + torch.rand(2, generator=self.gen)


def test_changed_state_sees_counters_buffers_and_new_tensor_attributes():
    m = Counting()
    before = state_signature(m)
    kept: dict[str, torch.Tensor] = {}
    m(torch.ones(3, 2))
    changed = changed_state(m, before, lambda k, v: kept.__setitem__(k, v))
    assert changed == {"calls": {"value": 1}, "last": {"tensor": True}, "seen": {"tensor": True}}
    assert torch.equal(kept["seen"], torch.full((2,), 3.0))
    assert "fc.weight" not in changed  # not written
    assert state_owner(m.forward) is m and state_owner(len) is None


def test_snapshot_restore_gives_the_same_call_again():
    m = Counting()
    saved = snapshot(m)
    first = m(torch.ones(1, 2))
    restore(m, saved)
    assert m.calls == 0 and torch.equal(m.seen, torch.zeros(2)) and not hasattr(m, "last")
    again = m(torch.ones(1, 2))
    assert torch.equal(first, again)  # the module's own generator was put back too


def test_written_inputs_sees_in_place_writes_and_container_changes():
    x, y = torch.ones(3), torch.ones(3)
    items: list = [1]
    original = ((x.clone(), y.clone(), [1]), {"k": torch.zeros(1)})
    x.mul_(2)
    items.append(2)
    kept: dict[str, torch.Tensor] = {}
    out = written_inputs(original, ((x, y, items), {"k": torch.zeros(1)}), lambda k, v: kept.__setitem__(k, v))
    assert out == {"args[0]": {"tensor": True}, "args[2][1]": {"value": 2}}
    assert torch.equal(kept["args[0]"], torch.full((3,), 2.0))
    nan = torch.tensor([float("nan")])
    assert written_inputs(((nan.clone(),), {}), ((nan,), {}), lambda k, v: None) == {}  # NaN stays NaN: not written
