"""`replicator run` turns on Python's fault handler: a native crash (librdkafka aborting on an
assertion) must leave the Python stacks of every thread in the job's log, not just the C message."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import os, threading
from replicator.cli import crash_traces

def preflight_call():
    os.abort()  # what a failed librdkafka assertion does

crash_traces()
t = threading.Thread(target=preflight_call)
t.start()
t.join()
"""


def test_a_native_abort_leaves_the_python_stacks_in_the_log():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -6
    assert "Fatal Python error: Aborted" in proc.stderr
    assert "preflight_call" in proc.stderr, proc.stderr
