"""What an issue's tests add to `make test`: run them alone, as `make test` runs its files.

    python tools/issue_time.py 28 [--cpu-report FILE] [--workers 3]

Runs the issue's files (tests/issue_tests.py) with the suite's own settings — the same number
of pytest-xdist workers, `--dist loadfile`, the same marks — and prints:

- the wall time of that run: what the files take when nothing else runs beside them;
- the CPU they used, theirs and every process they started and reaped (brokers, JVMs, Maven);
- with ``--cpu-report`` (a ``STROM_TEST_CPU`` file of a full `make test` run: CPU seconds,
  wall seconds and path per file), the files' CPU in that run and the wall time that CPU is
  worth at the run's own rate of CPU per wall second: what they added to that run while the
  machine was full.

Summing each file's wall time overstates it: `make test` runs three files at once.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.issue_tests import ISSUE_TESTS, cpu_share  # noqa: E402

MARKS = "not confluent_suite and not iceberg_load_cluster"  # as the Makefile's test target


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("issue", type=int, choices=sorted(ISSUE_TESTS))
    ap.add_argument("--workers", type=int, default=int(os.environ.get("PYTEST_WORKERS", "3")))
    ap.add_argument("--cpu-report", type=Path,
                    help="a STROM_TEST_CPU file of a full make test run")
    ap.add_argument("--suite-wall", type=float,
                    help="that run's pytest wall time in seconds (for the CPU's worth)")
    args = ap.parse_args(argv)
    spec = ISSUE_TESTS[args.issue]
    missing = [p for p in spec.paths if not (ROOT / p).exists()]
    if missing:
        print(f"issue {args.issue}: no such test paths: {missing}", file=sys.stderr)
        return 2
    xdist = ["-n", str(args.workers), "--dist", "loadfile"] if args.workers > 0 else []
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist,
           "-m", MARKS, *spec.paths]
    cpu0, t0 = _children_cpu(), time.monotonic()
    rc = subprocess.call(cmd, cwd=ROOT)
    wall, cpu = time.monotonic() - t0, _children_cpu() - cpu0
    print(f"\nissue {args.issue}: {len(spec.paths)} test paths, budget {spec.budget_s:.0f} s")
    print(f"  alone, as make test runs them ({args.workers} workers, loadfile): "
          f"{wall:.0f} s wall, {cpu:.0f} s CPU")
    if args.cpu_report is not None:
        mine, total, summed = cpu_share(args.cpu_report, spec.paths)
        line = (f"  in {args.cpu_report}: {mine:.0f} s CPU of the run's {total:.0f} s "
                f"(their files' wall times summed: {summed:.0f} s)")
        if args.suite_wall:
            line += (f"; at that run's {total / args.suite_wall:.2f} CPU-seconds a second, "
                     f"worth {mine / total * args.suite_wall:.0f} s of its "
                     f"{args.suite_wall:.0f} s")
        print(line)
    return rc


if __name__ == "__main__":
    sys.exit(main())
