"""The order in which the suite's work goes to pytest-xdist's workers (tests/conftest.py):
units whole, the longest first by the recorded durations, and a fallback for tests the record lacks."""

from __future__ import annotations

import json

import pytest

from tests import conftest
from tests.conftest import work_order


class Item:
    """What the ordering reads of a collected test: its node id and its markers."""

    def __init__(self, nodeid: str, *marks):
        self.nodeid = nodeid
        self.marks = list(marks)

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)

    def get_closest_marker(self, name):
        return next(self.iter_markers(name), None)

    def __repr__(self):
        return self.nodeid


def group(name):
    return pytest.mark.xdist_group(name).mark


def ids(items):
    return [item.nodeid for item in items]


def test_the_longest_unit_goes_first_and_a_group_stays_together():
    items = [Item("a.py::quick"), Item("b.py::one", group("b")), Item("c.py::long"), Item("b.py::two", group("b")),
             Item("d.py::medium")]
    recorded = {"c.py::long": 200.0, "b.py::one": 40.0, "b.py::two": 30.0, "d.py::medium": 50.0}
    assert ids(work_order(items, recorded)) == ["c.py::long", "b.py::one", "b.py::two", "d.py::medium", "a.py::quick"]


def test_a_group_s_seconds_are_its_tests_together():
    items = [Item("a.py::long"), Item("g.py::x", group("g")), Item("g.py::y", group("g"))]
    recorded = {"a.py::long": 50.0, "g.py::x": 30.0, "g.py::y": 30.0}
    assert ids(work_order(items, recorded))[0] == "g.py::x"


def test_an_unrecorded_slow_or_docker_test_counts_as_long_and_another_as_short():
    items = [Item("a.py::recorded"), Item("b.py::new"), Item("c.py::new_slow", pytest.mark.slow.mark),
             Item("d.py::new_docker", group("docker"))]
    order = ids(work_order(items, {"a.py::recorded": 5.0}))
    assert sorted(order[:2]) == ["c.py::new_slow", "d.py::new_docker"]
    assert order[2:] == ["a.py::recorded", "b.py::new"]


def test_ties_go_to_groups_and_larger_groups_first():
    items = [Item("a.py::t"), Item("s.py::x", group("s")), Item("l.py::x", group("l")), Item("l.py::y", group("l"))]
    assert ids(work_order(items, {})) == ["l.py::x", "l.py::y", "s.py::x", "a.py::t"]


def test_the_durations_record_is_read_and_holds_only_long_tests():
    recorded = conftest._recorded_durations()
    assert recorded, "tests/durations.json is missing or unreadable"
    assert all(isinstance(v, float) and v >= conftest.RECORD_MIN_S for v in recorded.values())
    assert json.loads(conftest.DURATIONS.read_text()) == recorded
