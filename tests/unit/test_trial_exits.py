"""TrialExits (a node's record of its trial processes' exits): a node that ends a process waits for its
exit, and one that asks after the exit was already taken does not wait at all."""

from __future__ import annotations

from quanta.executor.runtime.trial_exits import TrialExits


def test_an_end_asked_before_the_exit_is_woken_by_it_with_the_nodes_reason() -> None:
    exits = TrialExits()
    waiter = exits.ending(7, "stale")
    assert not waiter.is_set() and exits.fenced(7)
    assert exits.took(7, "killed") == "stale"
    assert waiter.is_set() and not exits.fenced(7)


def test_an_end_asked_after_the_exit_was_taken_does_not_wait_and_leaves_no_reason() -> None:
    exits = TrialExits()
    exits.forget(7)  # a process starts
    first = exits.ending(7, "stale")  # the fence check ends it
    assert exits.took(7, "killed") == "stale" and first.is_set()
    exits.mark(7, "handoff")
    second = exits.ending(7, "stale")  # a round that saw it resident before its exit was taken
    assert second.is_set() and not exits.fenced(7)
    assert exits.took(7, "crashed") is None  # a later exit is not put down to this node


def test_after_a_new_process_starts_an_end_waits_for_its_exit() -> None:
    exits = TrialExits()
    exits.took(7, "completed")
    exits.forget(7)  # a new process of the trial starts here
    waiter = exits.ending(7, "handoff")
    assert not waiter.is_set()
    assert exits.took(7, "killed") == "handoff" and waiter.is_set()
