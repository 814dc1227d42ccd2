"""The run-folder lock (docs/reliability.md): ``.lock`` is gone when a run ends, and removing it
never lets two processes hold one folder.

The race being guarded against: process B opens ``.lock`` while A holds it; A removes
the file and unlocks; B's flock then succeeds on the removed file while C creates and
locks a new ``.lock``. :class:`bnexp.runfolders.rundir.RunLock` prevents it by unlinking before
unlocking and by checking, after the flock, that the path is still the locked file.
"""

from __future__ import annotations

import os

import pytest

from bnexp.runfolders import rundir, start


def test_release_removes_the_lock_file_and_the_folder_can_be_taken_again(tmp_path):
    lock = rundir.RunLock(tmp_path)
    assert lock.acquire()
    assert (tmp_path / ".lock").read_text() == str(os.getpid())
    lock.release()
    assert not (tmp_path / ".lock").exists()
    lock.release()  # idempotent
    again = rundir.RunLock(tmp_path)
    assert again.acquire()
    again.release()
    assert list(tmp_path.iterdir()) == []


def test_a_held_lock_keeps_a_second_lock_out_and_its_file(tmp_path):
    first, second = rundir.RunLock(tmp_path), rundir.RunLock(tmp_path)
    assert first.acquire()
    assert not second.acquire()
    second.release()  # a lock that was never taken removes nothing
    assert (tmp_path / ".lock").read_text() == str(os.getpid())
    first.release()
    assert not (tmp_path / ".lock").exists()


def _after_first_open(monkeypatch, between) -> list[int]:
    """Make ``os.open`` (as the lock calls it) run ``between()`` right after it opened its first
    file, before the lock's flock: the interleaving of another process. Returns the opened fds."""
    real_open, calls = os.open, []

    def open_then_interleave(path, flags, mode=0o777):
        fd = real_open(path, flags, mode)
        calls.append(fd)
        if len(calls) == 1:
            between()
        return fd

    monkeypatch.setattr(rundir.os, "open", open_then_interleave)
    return calls


def test_acquire_that_locks_a_file_removed_meanwhile_does_not_share_the_folder(tmp_path, monkeypatch):
    """B opens the old file; A releases (removes it) and C takes a new one; then B locks
    the removed file: B must see that and find the folder held by C."""
    a, b, c = (rundir.RunLock(tmp_path) for _ in range(3))
    assert a.acquire()

    def a_ends_c_starts():  # B has the old file open
        a.release()
        assert c.acquire()

    _after_first_open(monkeypatch, a_ends_c_starts)
    assert not b.acquire()  # C holds the folder; B's flock on the removed file does not count
    monkeypatch.undo()
    assert c.fd is not None and b.fd is None
    assert (tmp_path / ".lock").read_text() == str(os.getpid())
    c.release()
    assert not (tmp_path / ".lock").exists()


def test_acquire_retries_when_the_file_it_locked_was_removed_and_nobody_holds_the_folder(tmp_path, monkeypatch):
    a, b = rundir.RunLock(tmp_path), rundir.RunLock(tmp_path)
    assert a.acquire()
    calls = _after_first_open(monkeypatch, a.release)  # A removes the file B has just opened
    assert b.acquire()
    monkeypatch.undo()
    assert len(calls) == 2  # the removed file, then a new .lock
    st, mine = os.stat(tmp_path / ".lock"), os.fstat(b.fd)
    assert (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
    b.release()


def _take_and_release(folder, rounds: int, out) -> None:
    """Worker of the test below: take and release ``folder``'s lock ``rounds`` times;
    send (times held, times another holder was seen)."""
    import time

    owner, me, held, clashes = folder / "owner", str(os.getpid()), 0, 0
    deadline = time.monotonic() + 120  # a busy machine: the rounds take long, but must all happen
    while held < rounds and time.monotonic() < deadline:
        lock = rundir.RunLock(folder)
        if not lock.acquire():
            continue
        held += 1
        owner.write_text(me)
        time.sleep(0.0005)
        clashes += owner.read_text() != me
        lock.release()
    out.send((held, clashes))


@pytest.mark.slow  # four forked processes race (2-3 s of CPU); the interleavings above check the same deterministically
def test_processes_taking_and_releasing_one_folder_never_hold_it_together(tmp_path):
    """Four processes take and release one folder's lock in a loop; while holding it each
    writes its pid to a shared file and checks it is still there after a pause. (Without
    the same-file check in acquire(), this sees dozens of clashes per process.)"""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")  # fast start: bnexp is already imported
    pipes = [ctx.Pipe(duplex=False) for _ in range(4)]
    procs = [ctx.Process(target=_take_and_release, args=(tmp_path, 100, w)) for _, w in pipes]
    for p in procs:
        p.start()
    results = [r.recv() for r, _ in pipes]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert [c for _, c in results] == [0, 0, 0, 0]  # never two holders at once
    assert sum(h for h, _ in results) >= 200  # the folder was taken and released many times
    assert not (tmp_path / ".lock").exists()


def test_lock_or_refuse_names_the_holder_and_leaves_the_folder_alone(tmp_path):
    """A held folder: None and one line naming the holder's pid (the job leaves it alone); a free one: the lock."""
    from bnexp.runfolders.start import lock_or_refuse

    run = tmp_path / "run"
    said = []
    first = lock_or_refuse(run, said.append)
    assert first is not None and said == [] and (run / ".lock").read_text().strip() == str(os.getpid())
    assert lock_or_refuse(run, said.append) is None
    assert said == [f"{run} is in use by another bnexp process (pid {os.getpid()}); this job leaves it alone."]
    first.release()
    again = lock_or_refuse(run, said.append)
    assert again is not None and len(said) == 1
    again.release()


@pytest.mark.parametrize("status, resume, skipped", [("finished", None, True), ("diverged", True, True),
                                                     ("finished", False, False), ("interrupted", None, False)])
def test_complete_summary_is_what_a_start_skips(tmp_path, status, resume, skipped):
    """A finished or diverged run is skipped unless trainer.resume=false starts it over."""
    rundir.write_summary(tmp_path, {"status": status})
    assert start.complete_summary(tmp_path, resume) == ({"status": status} if skipped else None)
