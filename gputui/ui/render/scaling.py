"""The runner's scaling view, drawn from a session: a bar per world size that fills as its
run trains, then its images/s, speedup, efficiency and all-reduce share.

The figures are the ones ``gputui scale`` prints (:func:`gputui.jobs.scale.report.scale_rows`).
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gputui.format import fmt_count, fmt_counted, fmt_percent, fmt_times
from gputui.jobs.results import RunRecord, Session
from gputui.jobs.scale.report import SUPERLINEAR, scale_rows, scale_warnings
from gputui.ui.render.runner import BAR_CHAR, MUTED, TRACK_CHAR, cpu_threads_note, error_message

FIGURES_WIDTH = 52
"""Cells the columns beside the bar take (ranks, share done, images/s, speedup, efficiency,
all-reduce share, and the gaps between them)."""


def scaling_body(session: Session, width: int, cores: int | None = None) -> RenderableType:
    """The scaling table of ``session`` (a scaling session), ``width`` cells wide, and a
    warning under it for each figure that is noise or oversubscription (``cores``: this
    machine's, where the ranks run)."""
    scaling = session.scaling or "weak"
    rows = scale_rows(session.runs, scaling, cores)
    bar_width = max(width - FIGURES_WIDTH, 6)
    table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
    for name, justify in (
        ("Ranks", "right"),
        ("Progress", "left"),
        ("Images/s", "right"),
        ("Speedup", "right"),
        ("Eff.", "right"),
        ("All-red.", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for index, config in enumerate(session.configs):
        ranks = str(getattr(config, "world_size", 1))
        if index >= len(session.runs):
            table.add_row(ranks, Text("waiting", style=MUTED), "", "", "", "")
            continue
        run, row = session.runs[index], rows[index]
        if run.error is not None:
            table.add_row(ranks, Text(f"✗ {error_message(run.error)}", style="red"), "", "", "", "")
            continue
        table.add_row(
            ranks,
            progress_bar(run, bar_width),
            _rate(row["images_per_second"], run),
            fmt_times(row["speedup"], precision=2),
            Text(
                fmt_percent(_percent(row["efficiency"])),
                style="yellow" if SUPERLINEAR in row["warnings"] else "",
            ),
            fmt_percent(_percent(row["allreduce_share"])),
        )
    keeps = "the batch of each rank" if scaling == "weak" else "the job's batch, split"
    legend = Text(
        f"{scaling} scaling: every world size keeps {keeps}; speedup: images/s over "
        f"{fmt_counted(_first_ranks(session), 'rank')}; eff.: speedup / the ranks' multiple; "
        "all-red.: share of a step waiting on the gradients' all-reduce",
        style=MUTED,
    )
    warnings = [Text(f"⚠ {warning}", style="yellow") for warning in scale_warnings(rows)]
    note = _threads_note(session, cores)
    return Group(table, Text(), legend, *([note] if note.plain else []), *warnings)


def progress_bar(run: RunRecord, width: int) -> Text:
    """A bar of ``width`` cells filled to the share of the run's training done."""
    done = run.share_done
    filled = round(width * done)
    style = "green" if run.ended and run.status == "ok" else "cyan"
    text = Text(BAR_CHAR * filled, style=style)
    text.append(TRACK_CHAR * (width - filled), style=MUTED)
    text.append(f" {done:4.0%}")
    return text


def _rate(steady: float | None, run: RunRecord) -> Text:
    """The steady images/s; before there is one, the latest figure, dimmed."""
    if steady is not None:
        return Text(fmt_count(steady))
    return Text(fmt_count(run.best_images_per_second), style=MUTED)


def _percent(share: float | None) -> float | None:
    return None if share is None else share * 100.0


def _threads_note(session: Session, cores: int | None) -> Text:
    """On the CPU, whether the first world size had fewer threads, all ranks together, than
    ``gputui scale`` gives it (the runner keeps a core for the monitor)."""
    first = session.runs[0] if session.runs else None
    if first is None or first.started is None or first.device.kind != "cpu":
        return Text()
    ranks = int(getattr(first.config, "world_size", 1))
    return cpu_threads_note(
        first.started.num_threads * ranks,
        cores,
        "gputui scale",
        f"its {ranks}-rank run is faster, and the speedups over it lower, than these",
    )


def _first_ranks(session: Session) -> int:
    return int(getattr(session.configs[0], "world_size", 1)) if session.configs else 1
