"""The event hub's notification payloads: `run_id` or `run_id:seq`, a read skipped when the hub
has already read the run that far."""

from __future__ import annotations

import uuid

from app.api.event_hub import EventHub


def sharing_hub() -> EventHub:
    """A hub in the state of one that listens and reads for its streams (no connection made)."""
    hub = EventHub("postgresql://u:p@localhost:1/db")
    hub.listening = True
    hub._reader_ok = True
    return hub


def test_a_notification_marks_a_run_with_streams_for_reading() -> None:
    hub = sharing_hub()
    run_id, other = uuid.uuid4(), uuid.uuid4()
    with hub.subscribe(run_id) as sub:
        hub.go_live(sub, 3)
        hub._pending.clear()
        hub._on_notify(str(other))  # nobody streams it
        hub._on_notify("not-a-run:1")
        hub._on_notify(f"{run_id}:x")
        assert hub._pending == set()
        hub._on_notify(str(run_id))  # the bare form
        assert hub._pending == {run_id}


def test_a_notification_up_to_a_seq_already_read_is_skipped() -> None:
    hub = sharing_hub()
    run_id = uuid.uuid4()
    with hub.subscribe(run_id) as sub:
        hub.go_live(sub, 3)
        hub._pending.clear()
        hub._on_notify(f"{run_id}:4")  # nothing read yet: read
        assert hub._pending == {run_id}
        hub._pending.clear()
        hub._read_seq[run_id] = 6
        hub._on_notify(f"{run_id}:5")
        hub._on_notify(f"{run_id}:6")
        assert hub._pending == set()
        hub._on_notify(f"{run_id}:7")
        assert hub._pending == {run_id}


def test_without_the_shared_read_a_notification_wakes_the_streams() -> None:
    hub = sharing_hub()
    hub._reader_ok = False
    run_id = uuid.uuid4()
    with hub.subscribe(run_id) as sub:
        hub._read_seq[run_id] = 9  # stale: streams read for themselves, from their own seq
        hub._on_notify(f"{run_id}:2")
        _, must_read = sub.take()
        assert must_read and hub._pending == set()
