"""The command palette's entries on the monitor: every key the footer shows, with what it
does (the app adds its keys, from its bindings), so a user who forgot a key finds it by
name (a test holds that every key is here). The help screen says the same of each key."""

from __future__ import annotations

MONITOR_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("Help", "Every key, by area: monitor, runner, GPU processes", "help"),
    (
        "GPU topology",
        "How the NVIDIA GPUs reach each other: NVLink, PCIe (as nvidia-smi topo -m)",
        "topology",
    ),
    ("Train", "Train the chosen configuration", "runner_start"),
    ("Compare", "Train on the baseline device, then the chosen one", "runner_compare"),
    (
        "Run experiment",
        "Run the chosen experiment: batch-sweep, sync-stall or pipelines",
        "runner_experiment",
    ),
    (
        "Scale",
        "Train on 1, 2, 4... ranks (torch.distributed) and show the speedup",
        "runner_scale",
    ),
    ("Stop training", "Stop the run", "runner_stop"),
    ("Toggle runner", "Show or hide the runner pane", "runner_toggle"),
    ("Error detail", "Show or hide a failed run's detail", "runner_detail"),
    (
        "Sort processes",
        "Sort the GPU processes by the next column (marked ▲ or ▼ in its heading): GPU, "
        "GPU memory, SM %, CPU %, host memory, elapsed, PID, user, command, type",
        "process_sort",
    ),
    ("Reverse process order", "Turn the GPU processes' order round", "process_reverse"),
    (
        "Filter processes",
        "Show only the GPU processes holding some text; Enter applies it",
        "process_filter",
    ),
    (
        "Process history",
        "Show the selected GPU process's GPU memory and SM % over time, its GPUs, user, "
        "command and job",
        "process_history",
    ),
    ("Clear process filter", "Show every GPU process again", "process_clear_filter"),
    (
        "Terminate process",
        "Send SIGTERM to the selected GPU process, once y confirms",
        "process_terminate",
    ),
    (
        "Kill process",
        "Send SIGKILL to the selected GPU process, once y confirms",
        "process_kill",
    ),
    (
        "Interrupt process",
        "Send SIGINT (as Ctrl+C) to the selected GPU process, once y confirms",
        "process_interrupt",
    ),
)
"""Title, help and the app's action (``action_<name>``), in the palette's order (the
Doctor's entry comes first; its title and help live with its screen). The help is shown
with the action's keys after it: ``Stop the run (s)``."""
