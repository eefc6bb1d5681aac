"""Command lines with their secrets redacted (gputui/telemetry/commandline.py), and the NVML
sampler joining a real process whose command line holds one."""

from __future__ import annotations

import pytest

from gputui.telemetry.commandline import command_line, redact_secrets
from gputui.telemetry.nvml import NvmlSampler
from tests.fakenvml import FakeNvml
from tests.hostile import SECRET, crafted_process


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["app", "--password=hunter2"], "app --password=***"),
        (["app", "--password=two words"], "app --password=***"),
        (["app", "--db-password", "hunter2", "-v"], "app --db-password *** -v"),
        (["app", "--token", "--verbose"], "app --token --verbose"),  # a flag, no value
        (["env", "HF_TOKEN=hf_abc", "API_KEY=k", "x"], "env HF_TOKEN=*** API_KEY=*** x"),
        (
            ["app", "--client-secret=s", "--secret-key=s"],
            "app --client-secret=*** --secret-key=***",
        ),
        (["docker", "run", "-e", "DB_PASSWORD=pw"], "docker run -e DB_PASSWORD=***"),
        (["app", "--env=MYSQL_PWD=pw"], "app --env=MYSQL_PWD=***"),
        (["curl", "https://h/x?token=abc&y=1"], "curl https://h/x?token=***&y=1"),
        (["psql", "postgres://ada:p@ss@db:5432/x"], "psql postgres://ada:***@db:5432/x"),
        (
            ["git", "clone", "https://ghp_abc@github.com/o/r"],
            "git clone https://***@github.com/o/r",
        ),
        (["curl", "-H", "Authorization: Bearer abc"], "curl -H Authorization: Bearer ***"),
        (["sh", "-c", "export AUTH_TOKEN=t; run"], "sh -c export AUTH_TOKEN=***; run"),
        # Left alone: nothing secret in them.
        (["python", "train.py", "--max_tokens=512"], "python train.py --max_tokens=512"),
        (["python", "train.py", "--tokenizer=gpt2"], "python train.py --tokenizer=gpt2"),
        (["curl", "http://host:8080/a?mail=a@b.c"], "curl http://host:8080/a?mail=a@b.c"),
        (["torchrun", "--nproc-per-node", "8", "train.py"], "torchrun --nproc-per-node 8 train.py"),
    ],
)
def test_the_common_shapes_of_a_secret_are_redacted(argv: list[str], shown: str) -> None:
    assert command_line(argv) == shown
    assert command_line(argv, raw=True) == " ".join(argv)


def test_redaction_keeps_one_argument_per_argument() -> None:
    argv = ["app", "--password", "a b", "--x=1"]
    assert redact_secrets(argv) == ["app", "--password", "***", "--x=1"]


def test_the_sampler_redacts_a_real_process_command_line_unless_asked_for_raw(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    with crafted_process() as child:
        fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:{child.pid}:1073741824")
        commands = {}
        for raw in (False, True):
            with NvmlSampler(raw_commands=raw) as sampler:
                (process,) = sampler.sample().gpus[0].processes or ()
            commands[raw] = process.command or ""
    assert "--password=***" in commands[False] and SECRET not in commands[False]
    assert f"--password={SECRET}" in commands[True]
    assert commands[False].replace("--password=***", f"--password={SECRET}") == commands[True]
