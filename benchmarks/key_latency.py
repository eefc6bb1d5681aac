"""Key-to-screen latency of gputui, idle and while the runner trains on the CPU, side by side.

gputui runs in a real pseudo-terminal (160x50, the runner beside the monitor) against
the stand-in NVML library. The key is ``t`` (hide or show the runner pane); the
latency of one press is the time from writing the key to the pty until the terminal
receives the redrawn screen (the text that only the new layout draws: ``Runner`` when
it reappears, ``GPU processes`` when the monitor widens). Each press waits for the
previous one's frame. Then ``r`` starts a CPU training run with the pane's defaults
(nice 10, every core but one) on synthetic data, and the same presses are timed
again while it trains.

    python benchmarks/key_latency.py                 # 40 presses per phase
    python benchmarks/key_latency.py --presses 20 --json

Issue 4's goal: p95 under 150 ms during CPU training. Not a test: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import PtyProgram, machine_description  # noqa: E402
from tests.fakenvml import build_fake_nvml  # noqa: E402

TRAINING = {
    "dataset": "synthetic",
    "limit": 50_000,
    "test_limit": 1_000,
    "epochs": 100,
    "record": False,
}
"""Long enough to keep the CPU busy for the whole measurement."""


@dataclass(frozen=True)
class Phase:
    """The latencies of one phase."""

    name: str
    presses: int
    missed: int
    """Presses whose frame never arrived within the timeout."""
    p50_ms: float
    p95_ms: float
    max_ms: float


def measure_phase(term: PtyProgram, name: str, presses: int, timeout_s: float = 2.0) -> Phase:
    """Press ``t`` ``presses`` times (an even number keeps the runner shown at the end)."""
    latencies: list[float] = []
    missed = 0
    shown = True
    for _ in range(presses):
        time.sleep(0.15)
        marker = b"GPU processes" if shown else b"Runner"
        at = term.press(b"t")
        frame = term.wait_for(marker, at, timeout_s)
        shown = not shown
        if frame is None:
            missed += 1
            time.sleep(0.5)
            continue
        latencies.append((frame[1] - at) * 1000)
    ordered = sorted(latencies) or [float("nan")]
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return Phase(name, presses, missed, statistics.median(ordered), p95, ordered[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presses", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    presses = args.presses + args.presses % 2
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp))
        env = {
            "LD_LIBRARY_PATH": str(lib_dir),
            "FAKE_NVML_GPU_COUNT": "2",
            "GPUTUI_RUNNER_DEFAULTS": json.dumps(TRAINING),
        }
        term = PtyProgram(
            [sys.executable, "-m", "gputui", "--interval", "1"], env=env, size=(160, 50), cwd=REPO
        )
        try:
            if term.wait_for(b"Train r", 0.0, 60.0) is None:
                print("gputui never drew the runner pane", file=sys.stderr)
                return 1
            time.sleep(3.0)  # the device list arrives; the first polls settle
            idle = measure_phase(term, "idle", presses)
            started = term.press(b"r")
            if term.wait_for(b"img/s", started, 120.0) is None:
                print("the training run never reported progress", file=sys.stderr)
                return 1
            time.sleep(2.0)
            busy = measure_phase(term, "cpu training", presses)
        finally:
            term.close(b"qy")  # y: q asks first during a run
    result = {
        "machine": machine_description(),
        "phases": [asdict(idle), asdict(busy)],
        "p95_ratio_training_over_idle": busy.p95_ms / idle.p95_ms,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"key-to-screen latency (t), {presses} presses per phase, {result['machine']}")
    for phase in (idle, busy):
        print(
            f"  {phase.name:<13} p50 {phase.p50_ms:6.1f} ms  p95 {phase.p95_ms:6.1f} ms  "
            f"max {phase.max_ms:6.1f} ms  missed {phase.missed}"
        )
    print(f"  p95 ratio, training / idle: {result['p95_ratio_training_over_idle']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
