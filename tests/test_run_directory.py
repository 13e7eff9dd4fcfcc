"""The run-directory guarantees: one writer, whole files, no symlinks (keras_structured.run_directory)."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from keras_structured import run_directory as rd

# The other processes load keras_structured/run_directory.py alone: importing it from its package
# would import TensorFlow (5 s a process), which the module does not use.
LOAD_MODULE = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("run_directory", {rd.__file__!r})
run_directory = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_directory)
"""
HOLD_LOCK = (
    LOAD_MODULE
    + """
import time
lock = run_directory.RunLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(60)
"""
)


def test_second_lock_is_refused_with_the_holders_pid(tmp_path):
    with rd.RunLock(tmp_path):
        with pytest.raises(rd.RunLockedError, match=f"pid {os.getpid()}"):
            rd.RunLock(tmp_path).acquire()
    with rd.RunLock(tmp_path) as lock:  # released: free again
        assert lock.held


def test_lock_held_by_another_process_then_taken_over_after_its_death(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(rd.RunLockedError, match=f"pid {holder.pid}"):
            rd.RunLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with rd.RunLock(tmp_path) as lock:  # the dead process's lock is stale
        assert lock.previous_holder == holder.pid
        assert (tmp_path / rd.LOCK_FILE).read_text().strip() == str(os.getpid())


def test_lock_file_that_is_a_symlink_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("precious")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / rd.LOCK_FILE).symlink_to(target)
    with pytest.raises(rd.UnsafePathError, match="symlink"):
        rd.RunLock(tmp_path / "run").acquire()
    assert target.read_text() == "precious"


@pytest.mark.parametrize(
    "write",
    [lambda p: rd.write_text(p, "x"), lambda p: rd.write_json(p, {}), lambda p: rd.write_csv(p, ["a"], [])],
)
def test_writes_refuse_symlinks_and_leave_their_target_alone(tmp_path, write):
    target = tmp_path / "target.txt"
    target.write_text("precious")
    planted = tmp_path / "eval_test.json"
    planted.symlink_to(target)
    with pytest.raises(rd.UnsafePathError, match="eval_test.json"):
        write(planted)
    assert target.read_text() == "precious"
    folder = tmp_path / "linked"
    folder.symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "real").mkdir()
    with pytest.raises(rd.UnsafePathError, match="linked"):
        write(folder / "file")
    with pytest.raises(rd.UnsafePathError):
        rd.make_directory(folder)


def test_a_failing_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "progress.csv"
    rd.write_csv(path, ["epoch"], [[1], [2]])

    def fail(temporary):
        temporary.write_text("epoch\n")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rd.save_file(path, fail)
    assert rd.read_csv(path) == (["epoch"], [["1"], ["2"]])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["progress.csv"]


def test_a_process_killed_while_rewriting_leaves_the_old_or_the_new_file(tmp_path):
    """A real kill in a loop of rewrites: the file is always whole."""
    path = tmp_path / "progress.csv"
    script = LOAD_MODULE + (
        "write_csv = run_directory.write_csv\n"
        "rows = [[i, 'x' * 200] for i in range(2000)]\n"
        "print('start', flush=True)\n"
        "while True:\n    write_csv(sys.argv[1], ['epoch', 'text'], rows)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "start"
    time.sleep(0.5)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    columns, rows = rd.read_csv(path)
    assert columns == ["epoch", "text"] and len(rows) == 2000


def test_appending_refuses_a_symlink_and_keeps_earlier_lines(tmp_path):
    log = tmp_path / "bench_train.log"
    with rd.open_for_appending(log) as handle:
        handle.write(b"first\n")
    with rd.open_for_appending(log) as handle:
        handle.write(b"second\n")
    assert log.read_text() == "first\nsecond\n"
    target = tmp_path / "target"
    target.write_text("precious")
    (tmp_path / "planted.log").symlink_to(target)
    with pytest.raises(rd.UnsafePathError, match="planted.log"):
        rd.open_for_appending(tmp_path / "planted.log")
    assert target.read_text() == "precious"


def test_temporaries_of_a_killed_writer_are_removed_by_the_next_lock(tmp_path):
    (tmp_path / "checkpoint").mkdir()
    left = [tmp_path / ".best.ab12cd_e.tmp.keras", tmp_path / "checkpoint" / ".state.x1y2z3w4.tmp.json"]
    kept = [tmp_path / "notes.tmp", tmp_path / ".hidden", tmp_path / "best.keras"]
    for path in left + kept:
        path.write_text("x")
    with rd.RunLock(tmp_path):
        assert not any(path.exists() for path in left)
        assert all(path.exists() for path in kept)


def test_a_temporary_file_name_matches_what_the_lock_removes(tmp_path, monkeypatch):
    seen = []

    def write(temporary):
        seen.append(temporary.name)
        raise KeyboardInterrupt  # as if killed: save_file deletes it, a kill would not

    with pytest.raises(KeyboardInterrupt):
        rd.save_file(tmp_path / "best.keras", write)
    assert rd._TEMPORARY.match(seen[0]) and seen[0].endswith(".tmp.keras")


def test_files_get_the_permissions_of_a_plainly_created_file(tmp_path):
    umask = os.umask(0o022)
    try:
        rd.write_json(tmp_path / "config.json", {})
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(umask)
    mode = {name: (tmp_path / name).stat().st_mode & 0o777 for name in ("config.json", "plain.json")}
    assert mode["config.json"] == mode["plain.json"] == 0o644


def test_a_row_cut_short_while_appended_is_left_out(tmp_path):
    path = tmp_path / "progress.csv"
    path.write_text("iteration,global_step\n1,512\n2,10")  # killed while writing "2,1024\n"
    assert rd.read_csv(path) == (["iteration", "global_step"], [["1", "512"]])


def test_a_released_lock_leaves_nothing_and_a_killed_holders_lock_goes_with_the_next(tmp_path):
    """Releasing deletes the lock file, and the folders that taking the lock created if nothing was
    written there; a killed holder's lock file is taken over, then deleted by the next release."""
    new = tmp_path / "made" / "run"
    rd.RunLock(new).acquire().release()
    assert not (tmp_path / "made").exists()
    with rd.RunLock(new):
        (new / "config.json").write_text("{}")
    assert sorted(path.name for path in new.iterdir()) == ["config.json"]
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(new)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (new / rd.LOCK_FILE).read_text().strip() == str(holder.pid)  # a kill leaves it
    with rd.RunLock(new) as lock:
        assert lock.previous_holder == holder.pid
    assert sorted(path.name for path in new.iterdir()) == ["config.json"]


def test_a_lock_file_deleted_after_it_was_opened_is_not_held(tmp_path, monkeypatch):
    """A process that opened the lock file just before its holder released (and deleted) it
    locks the file that is there, not the deleted one: two writers never both hold the lock."""
    opened = []
    real_open = os.open

    def open_then_release(path, *args):
        handle = real_open(path, *args)
        if not opened:  # the first holder releases between this process's open and lock
            opened.append(handle)
            first.release()
        return handle

    first = rd.RunLock(tmp_path).acquire()
    monkeypatch.setattr(os, "open", open_then_release)
    second = rd.RunLock(tmp_path).acquire()
    monkeypatch.undo()
    with pytest.raises(rd.RunLockedError):  # a third process sees the second's lock
        rd.RunLock(tmp_path).acquire()
    assert os.fstat(second._handle).st_ino == os.stat(tmp_path / rd.LOCK_FILE).st_ino
    second.release()


def test_an_output_file_follows_symlinked_folders_and_clears_a_killed_writers_temporary(tmp_path):
    """An output path is the user's: written through a symlinked folder; a writer killed while it
    wrote leaves its temporary file, which the next write of the same file deletes, while a live
    writer's temporary file (locked) and other files are left alone."""
    real = tmp_path / "disk"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert rd.save_output_file(tmp_path / "link" / "out.conllu", lambda p: p.write_text("1")) == (
        real / "out.conllu"
    )
    script = LOAD_MODULE + (
        "import time\n"
        "write = lambda p: (print('writing', flush=True), time.sleep(60))\n"
        "run_directory.save_output_file(sys.argv[1], write)\n"
    )
    output = str(tmp_path / "link" / "out.conllu")
    writer = subprocess.Popen([sys.executable, "-c", script, output], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    [left] = [path for path in real.iterdir() if path.name != "out.conllu"]
    assert left.name.startswith(".out.") and left.name.endswith(".tmp.conllu")
    live = real / ".out.l1ve_abc.tmp.conllu"
    other = [real / ".other.k1lled_a.tmp.conllu", real / "notes.tmp.conllu"]
    for path in (live, *other):
        path.write_text("x")
    handle = os.open(live, os.O_RDONLY)
    try:
        rd._lock(handle)  # as a live writer holds it
        rd.save_output_file(tmp_path / "link" / "out.conllu", lambda p: p.write_text("2"))
    finally:
        os.close(handle)
    assert not left.exists() and live.exists() and all(path.exists() for path in other)
    assert (real / "out.conllu").read_text() == "2" and (tmp_path / "link").is_symlink()


def test_a_lock_in_a_folder_it_may_not_write_in_is_released_all_the_same(tmp_path, monkeypatch):
    """A lock file that cannot be deleted (a read-only folder) stays, emptied: the lock is free."""
    lock = rd.RunLock(tmp_path).acquire()

    def refuse(path, missing_ok=False):
        raise PermissionError(f"[Errno 13] Permission denied: {str(path)!r}")

    monkeypatch.setattr(pathlib.Path, "unlink", refuse)
    lock.release()
    monkeypatch.undo()
    assert not lock.held and (tmp_path / rd.LOCK_FILE).read_text() == ""
    with rd.RunLock(tmp_path) as again:
        assert again.previous_holder is None
