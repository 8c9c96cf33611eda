"""The run state machine's transition table."""

from __future__ import annotations

from typing import get_args

import pytest

from app.core import state_machine as st
from app.core.state_machine import (
    ENDINGS,
    TRANSITIONS,
    InvalidTransitionError,
    RunStateName,
    check_transition,
)


def reachable(start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_table_covers_exactly_the_named_states() -> None:
    assert set(TRANSITIONS) == set(get_args(RunStateName))
    assert all(targets <= set(TRANSITIONS) for targets in TRANSITIONS.values())
    assert {st.COMPLETED, st.FAILED, st.CANCELLED} == ENDINGS


def test_endings_are_final_and_every_other_state_can_end() -> None:
    for state, targets in TRANSITIONS.items():
        if state in ENDINGS:
            assert targets == frozenset()
        else:
            assert targets >= ENDINGS, state  # fail, complete or cancel from anywhere
    assert reachable(st.QUEUED) == set(TRANSITIONS)


@pytest.mark.parametrize(
    ("current", "to"),
    [
        (st.QUEUED, st.THINKING),
        (st.QUEUED, st.PLANNING),
        (st.QUEUED, st.TOOL_CALLING),  # resumed with pending calls
        (st.QUEUED, st.COMPLETED),  # resumed with a stored answer
        (st.THINKING, st.RESPONDING),
        (st.THINKING, st.TOOL_CALLING),
        (st.RESPONDING, st.TOOL_CALLING),
        (st.TOOL_CALLING, st.OBSERVING),
        (st.TOOL_CALLING, st.AWAITING_APPROVAL),
        (st.OBSERVING, st.THINKING),
        (st.PLANNING, st.THINKING),
        (st.RESPONDING, st.PLANNING),
        (st.RESPONDING, st.THINKING),
        (st.AWAITING_APPROVAL, st.TOOL_CALLING),
    ],
)
def test_allowed(current: str, to: str) -> None:
    check_transition(current, to)


@pytest.mark.parametrize(
    ("current", "to"),
    [
        (st.COMPLETED, st.THINKING),
        (st.FAILED, st.QUEUED),
        (st.CANCELLED, st.FAILED),
        (st.QUEUED, st.OBSERVING),
        (st.QUEUED, st.RESPONDING),
        (st.OBSERVING, st.TOOL_CALLING),
        (st.OBSERVING, st.RESPONDING),
        (st.PLANNING, st.TOOL_CALLING),
        (st.TOOL_CALLING, st.THINKING),
        (st.THINKING, st.QUEUED),
        ("dreaming", st.THINKING),
    ],
)
def test_refused(current: str, to: str) -> None:
    with pytest.raises(InvalidTransitionError):
        check_transition(current, to)
