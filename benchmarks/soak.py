"""Soak: gputui for an hour at ``--interval 0.25`` on 8 simulated GPUs, training in a loop.

gputui runs in a real pseudo-terminal (160x50: the runner pane beside the monitor,
so both repaint) against the stand-in ``libnvidia-ml.so.1`` (tests/fakenvml) with
8 GPUs. The runner is driven the way a person drives it: press ``r``, see the pane
say ``training on``, wait for it to say ``finished`` (or fail), press ``r`` again.
Runs are tiny (``GPUTUI_RUNNER_DEFAULTS``: synthetic data, 512 images, 2 epochs,
one thread, no run folder), so hundreds start and end in an hour, each in a fresh
trainer child process. ``r`` is only pressed while the pane is idle: during a run it
would only show a "stop it first" warning.

Every few seconds the gputui process's RSS (psutil; the UI process only, not the
trainer) is sampled. Reported: RSS at the start of the steady state (after the
warm-up), at the end, its maximum, the growth, runs completed, and the processes
gputui started that are still alive after it quit (every process carrying this
run's marker in its environment, reparented ones included: must be 0).

History buffers: gputui/telemetry/history.py bounds them by design (a ``deque`` with
a fixed ``maxlen`` per metric, at most ``max_metrics`` metrics); the report states
the bound for this interval and GPU count. gputui exposes no way to read the
buffers' lengths from outside, so the flat RSS is the outward proof.

    python benchmarks/soak.py                  # one hour (the issue's soak)
    python benchmarks/soak.py --minutes 2      # a smoke test
    python benchmarks/soak.py --minutes 60 --json

Goal (issue 7): RSS grows less than 5 MiB over the hour. Not a test: it takes an hour.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import PtyProgram, machine_description  # noqa: E402
from gputui.telemetry.history import (  # noqa: E402
    CPU_METRIC,
    DEFAULT_MAX_METRICS,
    DEFAULT_WINDOW_S,
    memory_metric,
    samples_for_window,
    util_metric,
)
from tests.fakenvml import build_fake_nvml  # noqa: E402

GPU_COUNT = 8
SIZE = (160, 50)
TRAINING = {
    "dataset": "synthetic",
    "limit": 512,
    "test_limit": 256,
    "epochs": 2,
    "threads": 1,
    "record": False,
}
"""Each run: a few seconds, most of it the child's torch import."""
MARKER_ENV = "GPUTUI_SOAK_MARKER"
"""Set in gputui's environment; every process it starts inherits it."""
GOAL_MIB = 5.0
"""Issue 7: RSS grows less than this over the hour."""
HOUR_S = 3600.0
READY = b"Train r"
"""The runner pane is drawn."""
RUNNING = b"training on"
"""The pane's status line while a run trains."""
FINISHED, FAILED, STOPPED = "✓ finished".encode(), "✗ ".encode(), "■ stopped".encode()
START_TIMEOUT_S = 60.0
"""Longest wait for a pressed ``r`` to show a run training."""
RUN_TIMEOUT_S = 600.0
"""Longest wait for a run to end."""
IDLE_S = 0.5
"""The pause a person makes between seeing a run finish and pressing ``r``."""


@dataclass
class Sample:
    """One reading of the gputui process."""

    t_s: float
    """Seconds since gputui started."""
    rss_bytes: int
    """Resident set size of the gputui process."""
    threads: int
    """Its threads."""
    fds: int
    """Its open file descriptors."""


@dataclass
class Runs:
    """What the loop of runs did."""

    pressed: int = 0
    """Times ``r`` was pressed."""
    started: int = 0
    """Runs the pane showed training."""
    completed: int = 0
    """Runs the pane showed finished."""
    failed: int = 0
    """Runs the pane showed failed (or stopped)."""
    not_started: int = 0
    """Presses after which no run showed within START_TIMEOUT_S."""
    hung: int = 0
    """Runs that had not ended RUN_TIMEOUT_S after they started."""
    seconds: list[float] = field(default_factory=list)
    """Seconds from pressing ``r`` to the pane showing the run's end, per ended run."""
    trainer_pids: set[int] = field(default_factory=set)
    """Trainer child processes seen (psutil, about once a second; not the device listing)."""


@dataclass(frozen=True)
class SoakResult:
    """The figures of one soak."""

    machine: str
    """The machine, in one line."""
    command: str
    """The command that produced these figures."""
    interval_s: float
    """gputui's ``--interval``."""
    gpus: int
    """Simulated GPUs."""
    size: str
    """The terminal, COLSxROWS."""
    duration_s: float
    """Seconds from gputui's start to the last sample."""
    warmup_s: float
    """Seconds before the steady state starts."""
    rss_start_mib: float
    """RSS at the first sample of the steady state (after the warm-up)."""
    rss_end_mib: float
    """RSS at the last sample before quitting."""
    rss_max_mib: float
    """Highest RSS in the steady state."""
    growth_mib: float
    """End minus start."""
    slope_mib_per_hour: float
    """Least-squares slope of RSS over the steady state."""
    history_full_s: float
    """When the history buffers reach their bound (the sparkline window)."""
    growth_after_history_full_mib: float | None
    """RSS growth from the first sample after ``history_full_s`` to the end (if reached)."""
    threads_start_end: tuple[int, int]
    """gputui's threads at the start of the steady state and at the end."""
    fds_start_end: tuple[int, int]
    """gputui's open file descriptors at the start of the steady state and at the end."""
    runs_pressed: int
    """Times ``r`` was pressed."""
    runs_started: int
    """Runs the pane showed training."""
    runs_completed: int
    """Runs the pane showed finished."""
    runs_failed: int
    """Runs the pane showed failed or stopped."""
    presses_not_started: int
    """Presses of ``r`` that started no run."""
    runs_hung: int
    """Runs not ended within RUN_TIMEOUT_S."""
    median_run_s: float | None
    """Median seconds from pressing ``r`` to the pane showing the run's end."""
    trainer_processes_seen: int
    """Distinct trainer child processes seen."""
    exit_code: int | None
    """gputui's exit status after ``q``; None if it had to be killed."""
    left_after_quit: list[str]
    """Processes gputui started that were still alive after it quit (pid and command)."""
    history_bound: str
    """How the history buffers are bounded, for this interval and GPU count."""
    driver_cpu_s: float
    """CPU seconds this script itself used (its reader and watcher threads), for comparison."""
    samples: list[tuple[float, int]]
    """(seconds since start, RSS bytes) of every sample."""

    @property
    def verdict(self) -> str:
        """PASS or FAIL; a soak shorter than an hour can fail, but is not judged a pass."""
        if not self.passed:
            return "FAIL"
        if self.duration_s < HOUR_S:
            return (
                f"not judged: no fault, but the goal is over an hour ({self.duration_s:.0f} s ran)"
            )
        return "PASS"

    @property
    def passed(self) -> bool:
        """Growth under the goal, runs ended, nothing left behind, gputui quit by itself."""
        return (
            self.growth_mib < GOAL_MIB
            and self.runs_completed > 0
            and self.runs_hung == 0
            and not self.left_after_quit
            and self.exit_code == 0
        )


def history_bound(interval: float, gpus: int) -> str:
    """The history's bound for this interval and GPU count, from gputui's own constants."""
    per_metric = samples_for_window(DEFAULT_WINDOW_S, interval)
    metrics = {CPU_METRIC} | {name(i) for i in range(gpus) for name in (util_metric, memory_metric)}
    return (
        f"bounded by design (gputui/telemetry/history.py): a deque of maxlen "
        f"{per_metric} per metric ({DEFAULT_WINDOW_S:.0f} s at {interval:g} s), "
        f"{len(metrics)} metrics recorded (CPU + utilization and memory of {gpus} GPUs; "
        f"at most {DEFAULT_MAX_METRICS}), so at most {per_metric * len(metrics):,} values, "
        f"full after {per_metric * interval:.0f} s"
    )


def _marked(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``marker`` (gputui and what it started)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER_ENV) == marker and proc.status() != "zombie":
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _sample(ps: psutil.Process, started: float) -> Sample:
    with ps.oneshot():
        return Sample(
            round(time.perf_counter() - started, 2),
            ps.memory_info().rss,
            ps.num_threads(),
            ps.num_fds(),
        )


def _watch(
    ps: psutil.Process,
    started: float,
    every_s: float,
    samples: list[Sample],
    runs: Runs,
    stop: threading.Event,
) -> None:
    """Sample RSS every ``every_s``; note trainer children about once a second."""
    next_sample = 0.0
    while not stop.is_set():
        now = time.perf_counter() - started
        try:
            if now >= next_sample:
                samples.append(_sample(ps, started))
                next_sample = now + every_s
            children = ps.children(recursive=True)
        except psutil.Error:
            return  # gputui is gone
        for child in children:
            command = _cmdline(child)
            if "gputui.engine" in command and "train" in command:
                runs.trainer_pids.add(child.pid)
        stop.wait(min(1.0, every_s))


def _loop_runs(term: PtyProgram, deadline: float, runs: Runs) -> None:
    """Press ``r`` whenever the pane is idle, until ``deadline`` (perf_counter)."""
    while time.perf_counter() < deadline:
        pressed = term.press(b"r")
        runs.pressed += 1
        left = deadline - time.perf_counter()
        seen = term.wait_for(RUNNING, pressed, min(START_TIMEOUT_S, max(left, 0.0)))
        if seen is None:
            if time.perf_counter() < deadline:
                runs.not_started += 1
            continue
        runs.started += 1
        left = deadline - time.perf_counter()
        ended = term.wait_for((FINISHED, FAILED, STOPPED), seen[1], min(RUN_TIMEOUT_S, left))
        if ended is None:
            if time.perf_counter() < deadline:
                runs.hung += 1
            continue  # or the time is up with a run in flight: quitting must end it too
        runs.seconds.append(ended[1] - pressed)
        if ended[0] == FINISHED:
            runs.completed += 1
        else:
            runs.failed += 1
        time.sleep(IDLE_S)


def _mib(value: float) -> float:
    return value / 2**20


def _slope_per_hour(points: list[Sample]) -> float:
    if len(points) < 2:
        return math.nan
    xs = [p.t_s for p in points]
    ys = [_mib(p.rss_bytes) for p in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mean_x) ** 2 for x in xs)
    num = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    return num / den * 3600 if den else math.nan


def soak(duration_s: float, interval: float, warmup_s: float, sample_s: float) -> SoakResult:
    """Run the soak and return its figures (see the module's docstring)."""
    marker = uuid.uuid4().hex
    argv = [sys.executable, "-m", "gputui", "--interval", f"{interval:g}"]
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp) / "nvml")
        env = {
            "LD_LIBRARY_PATH": str(lib_dir),
            "FAKE_NVML_GPU_COUNT": str(GPU_COUNT),
            "GPUTUI_RUNNER_DEFAULTS": json.dumps(TRAINING),
            "XDG_STATE_HOME": str(Path(tmp) / "state"),
            "XDG_CACHE_HOME": str(Path(tmp) / "cache"),
            MARKER_ENV: marker,
        }
        term = PtyProgram(argv, env=env, size=SIZE)
        ps = psutil.Process(term.pid)
        samples: list[Sample] = []
        runs = Runs()
        stop = threading.Event()
        watcher = threading.Thread(
            target=_watch, args=(ps, term.started, sample_s, samples, runs, stop), daemon=True
        )
        watcher.start()
        exit_code: int | None = None
        try:
            if term.wait_for(READY, term.started, 60.0) is None:
                raise RuntimeError("gputui never drew the runner pane")
            _loop_runs(term, term.started + duration_s, runs)
            stop.set()
            watcher.join()
            samples.append(_sample(ps, term.started))
        finally:
            stop.set()
            exit_code = term.close(b"qy", timeout_s=15.0)  # y: q asks first during a run
            time.sleep(1.0)  # let the trainer's own shutdown finish before looking
            left = _marked(marker)
            for proc in left:  # ours: started by this soak; do not leave them running
                try:
                    proc.kill()
                except psutil.Error:
                    continue
    left_names = [f"{p.pid} {' '.join(_cmdline(p))}" for p in left]
    steady = [s for s in samples if s.t_s >= warmup_s]
    if not steady:
        raise RuntimeError("no sample after the warm-up: make the soak longer")
    first, last = steady[0], steady[-1]
    full_s = samples_for_window(DEFAULT_WINDOW_S, interval) * interval
    after_full = [s for s in samples if s.t_s >= full_s]
    return SoakResult(
        machine=machine_description(),
        command=" ".join(["python", "benchmarks/soak.py", *sys.argv[1:]]),
        interval_s=interval,
        gpus=GPU_COUNT,
        size=f"{SIZE[0]}x{SIZE[1]}",
        duration_s=samples[-1].t_s,
        warmup_s=warmup_s,
        rss_start_mib=_mib(first.rss_bytes),
        rss_end_mib=_mib(last.rss_bytes),
        rss_max_mib=_mib(max(s.rss_bytes for s in steady)),
        growth_mib=_mib(last.rss_bytes - first.rss_bytes),
        slope_mib_per_hour=_slope_per_hour(steady),
        history_full_s=full_s,
        growth_after_history_full_mib=(
            _mib(last.rss_bytes - after_full[0].rss_bytes) if len(after_full) > 1 else None
        ),
        threads_start_end=(first.threads, last.threads),
        fds_start_end=(first.fds, last.fds),
        runs_pressed=runs.pressed,
        runs_started=runs.started,
        runs_completed=runs.completed,
        runs_failed=runs.failed,
        presses_not_started=runs.not_started,
        runs_hung=runs.hung,
        median_run_s=statistics.median(runs.seconds) if runs.seconds else None,
        trainer_processes_seen=len(runs.trainer_pids),
        exit_code=exit_code,
        left_after_quit=left_names,
        history_bound=history_bound(interval, GPU_COUNT),
        driver_cpu_s=_own_cpu_seconds(),
        samples=[(s.t_s, s.rss_bytes) for s in samples],
    )


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return ["?"]


def report(r: SoakResult) -> str:
    """The human table."""
    after_full = (
        "n/a (shorter than that)"
        if r.growth_after_history_full_mib is None
        else f"{r.growth_after_history_full_mib:+.2f} MiB"
    )
    median = "n/a" if r.median_run_s is None else f"{r.median_run_s:.1f} s"
    rows = [
        ("RSS at start of steady state", f"{r.rss_start_mib:.1f} MiB (at {r.warmup_s:g} s)"),
        ("RSS at end", f"{r.rss_end_mib:.1f} MiB"),
        ("RSS max (steady state)", f"{r.rss_max_mib:.1f} MiB"),
        ("growth, end - start", f"{r.growth_mib:+.2f} MiB (goal: under {GOAL_MIB:g} MiB)"),
        ("slope (least squares)", f"{r.slope_mib_per_hour:+.2f} MiB/hour"),
        (f"growth after history full ({r.history_full_s:.0f} s)", after_full),
        ("threads, start -> end", "{} -> {}".format(*r.threads_start_end)),
        ("open fds, start -> end", "{} -> {}".format(*r.fds_start_end)),
        ("runs completed", f"{r.runs_completed} of {r.runs_started} started"),
        ("runs failed or stopped", str(r.runs_failed)),
        ("presses with no run", str(r.presses_not_started)),
        (f"runs not ended in {RUN_TIMEOUT_S:.0f} s", str(r.runs_hung)),
        ("median run, r to end", median),
        ("trainer processes seen", str(r.trainer_processes_seen)),
        ("gputui exit status after q", "killed" if r.exit_code is None else str(r.exit_code)),
        ("processes left after quit", str(len(r.left_after_quit))),
        ("this script's own CPU", f"{r.driver_cpu_s:.1f} s"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [
        f"soak: gputui --interval {r.interval_s:g}, {r.gpus} simulated GPUs, {r.size} pty, "
        f"{r.duration_s / 60:.1f} min, warm-up {r.warmup_s:g} s",
        f"machine: {r.machine}",
        *(f"  {name:<{width}}  {value}" for name, value in rows),
        *(f"    left: {line}" for line in r.left_after_quit),
        f"history: {r.history_bound}",
        f"result: {r.verdict}",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="length of the soak")
    parser.add_argument("--interval", type=float, default=0.25, help="gputui --interval")
    parser.add_argument(
        "--warmup", type=float, default=60.0, help="seconds before the steady state starts"
    )
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    args = parser.parse_args()
    duration_s = args.minutes * 60
    if not (duration_s > 0 and args.interval > 0 and args.sample_every > 0):
        parser.error("--minutes, --interval and --sample-every must be above 0")
    if not 0 <= args.warmup < duration_s - args.sample_every:
        parser.error("--warmup must leave at least one sample of steady state before the end")
    result = soak(duration_s, args.interval, args.warmup, args.sample_every)
    if args.json:
        data = asdict(result)
        data["passed"] = result.passed
        data["verdict"] = result.verdict
        print(json.dumps(data))
    else:
        print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
