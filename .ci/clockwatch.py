"""Watch this machine's clocks while CI runs: steps of the system clock against the
monotonic one (leases, due times and the local engines' clocks read the system clock; a
test's waits read the monotonic one), stalls (a 0.2 s sleep that took over a second:
the machine, or this process, was not scheduled), and the CPU time the hypervisor stole.
One line per event as it happens; on SIGTERM a summary line. A timing failure in CI can
then be read against what the clocks did.

Usage: python3 .ci/clockwatch.py > FILE &   (stop it with SIGTERM; it also ends when the
process that started it does, and keeps no descriptor it inherited but its output: a lock
held by CI's runner is not held on by it)"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

#: a change of (system clock - monotonic clock) from this size is reported as a step
STEP_S = 0.05
#: a sleep of TICK_S that took this long is reported as a stall
STALL_S = 1.0
TICK_S = 0.2


def steal_seconds() -> float:
    """CPU time stolen by the hypervisor since boot, all CPUs (/proc/stat; 0 elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / 100.0  # USER_HZ is 100 on Linux
    except (OSError, IndexError, ValueError):
        return 0.0


def stamp() -> str:
    return time.strftime("%H:%M:%S", time.gmtime())


def main() -> None:
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    parent = os.getppid()
    started, steal0 = time.monotonic(), steal_seconds()
    steps: list[float] = []
    stalls: list[float] = []

    def summary(signum: int, frame: FrameType | None) -> None:
        took = time.monotonic() - started
        print(f"{stamp()} clocks over {took:.0f} s: {len(steps)} steps of the system clock"
              f" ({', '.join(f'{s:+.2f} s' for s in steps) or 'none'}), {len(stalls)}"
              f" stalls ({', '.join(f'{s:.1f} s' for s in stalls) or 'none'}), "
              f"{steal_seconds() - steal0:.1f} s of CPU stolen by the hypervisor",
              flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, summary)
    offset, before = time.time() - time.monotonic(), time.monotonic()
    while os.getppid() == parent:
        time.sleep(TICK_S)
        now = time.monotonic()
        step = (time.time() - now) - offset
        if abs(step) >= STEP_S:
            steps.append(step)
            print(f"{stamp()} the system clock stepped {step:+.3f} s", flush=True)
        if now - before >= STALL_S:
            stalls.append(now - before)
            print(f"{stamp()} stall: a {TICK_S} s sleep took {now - before:.2f} s", flush=True)
        offset, before = time.time() - now, now
    summary(0, None)


if __name__ == "__main__":
    main()
