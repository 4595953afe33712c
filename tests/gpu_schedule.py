"""How gpu-check shares the suite among its workers (tools/gpu_check.py
runs `pytest -n 8 --dist loadfile --no-loadscope-reorder`), as pytest
hooks that conftest.py takes in.  The files that take longest go out
first; those whose tests stand alone go out a test at a time (or a group
of tests that share one run at a time), the rest whole, so that no long
file ends the run alone on one worker.  A run without xdist (`make test`,
the matrix) is not changed."""
import os

import pytest

# The work units that take longest, longest first, from the H200 gpu-check
# run of issue 27 (the sum of each file's test times: test_prompt.py 419 s,
# test_docs.py 290 s, test_plugin.py 182 s, test_startup.py 168 s), and
# three files since grown past test_lifetimes.py (a look-alike run here:
# test_gc_attack_children.py 92 s, test_trace_attack.py 88 s,
# test_interrupts.py 69 s, where test_lifetimes.py took 70 s).  A file
# kept whole is one unit as long as the whole file, so test_plugin.py goes
# out first: handed out sixth, it ended that run (316 s) alone, where a
# replay of the run's test times ends the other workers at about 210 s.
LONGEST_FIRST = ("test_plugin.py", "test_prompt.py", "test_docs.py", "test_startup.py",
                 "test_exit.py", "test_handle_memory.py", "test_aten_attack.py", "test_hosts.py",
                 "test_ddp.py", "test_gc_attack_children.py", "test_trace_attack.py",
                 "test_lifetimes.py", "test_interrupts.py")
# Of those, the files whose tests share a fixture wider than one test
# (test_plugin.py's module fixture runs pytest once for several of them):
# handed out a test at a time, each worker would run it again.
KEPT_WHOLE = ("test_plugin.py",)
# Of the others, the files whose tests share a run through a module-level
# cache, keyed by a part of their parameter ids: the tests of one key go
# out together, or each worker given one of them would run it again (on
# the H200, test_docs.py's pages ran 288 s where once each is about 100).
# test_docs.py runs each page once for all its blocks (ids "page#block");
# test_exit.py runs each exit case once for its two checks (ids "case").
SHARED_BY_ID = {"test_docs.py": lambda id: id.split("#", 1)[0],
                "test_exit.py": lambda id: id}


def order_longest_first(items):
    """In an xdist worker, the collection with the longest files first
    (a stable sort: each file's tests keep their order)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def work_unit(nodeid):
    """What a test goes out to a worker with: alone, where it is one of a
    long file's tests that stand alone; with the tests that share its run,
    where its file keeps one per key (SHARED_BY_ID); else its whole file."""
    file = nodeid.split("::", 1)[0]
    name = file.rsplit("/", 1)[-1]
    if name not in LONGEST_FIRST or name in KEPT_WHOLE:
        return file
    key = SHARED_BY_ID.get(name)
    if key is not None and nodeid.endswith("]") and "[" in nodeid:
        return f"{file}[{key(nodeid[nodeid.index('[') + 1:-1])}]"
    return nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with work_unit's units (xdist's own scheduler for
    files, told where a unit ends)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongFilesSpread(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return work_unit(nodeid)

    return LongFilesSpread(config, log)


def pytest_collection_modifyitems(items):
    """Loaded as a plugin of its own (`-p gpu_schedule`, as test_gpu_check
    does in a project of its own); conftest.py calls order_longest_first."""
    order_longest_first(items)
