"""The broker process ends after a clean shutdown even if a thread never finishes."""

import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import logging, sys, threading
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from strom.broker.app import _exit_watchdog
    threading.Thread(target=threading.Event().wait, name="stuck-forever").start()
    _exit_watchdog(0.3)
    print("main done", flush=True)
""")


def test_a_stuck_non_daemon_thread_does_not_keep_the_process_alive():
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "main done" in proc.stdout
    assert "still running" in proc.stderr and "stuck-forever" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 25
