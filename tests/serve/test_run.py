"""``--listen``, and ``serve()`` in this process: bind errors, the warning, and a clean stop."""

from __future__ import annotations

import io
import socket
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gputui.exits import Stop
from gputui.serve.listen import DEFAULT_PORT, ListenAddress, ListenError, is_loopback, parse_listen
from gputui.serve.run import ServeError, serve
from tests.fakenvml import FakeNvml
from tests.helpers import wait_for
from tests.serve.served import READY_TIMEOUT_S, gputui_serve

# --- --listen ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("127.0.0.1:9922", "127.0.0.1", 9922),
        ("0.0.0.0:0", "0.0.0.0", 0),
        ("[::1]:65535", "::1", 65535),
        ("[::]:9922", "::", 9922),
        ("localhost:8080", "localhost", 8080),
        ("gpu-07.lab.example:9922", "gpu-07.lab.example", 9922),
    ],
)
def test_listen_addresses(text: str, host: str, port: int) -> None:
    address = parse_listen(text)
    assert (address.host, address.port) == (host, port)
    assert str(address) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "9922",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "127.0.0.1:-1",
        "127.0.0.1:+1",
        "127.0.0.1:٩٩",  # digits, but not ASCII ones
        "::1:9922",
        "[::1]",
        "[::1]9922",
        "[127.0.0.1]:9922",
        "999.0.0.1:9922",
        "127.1:9922",
        "host name:9922",
        "-host:9922",
        "host_name:9922",
        "a" * 300 + ":9922",
        "\x1b[2J:9922",
    ],
)
def test_bad_listen_addresses_say_what_to_write(text: str) -> None:
    with pytest.raises(ListenError) as caught:
        parse_listen(text)
    message = str(caught.value)
    assert "\n" not in message
    assert "--listen" in message
    assert len(message) < 200


def test_the_default_port_clashes_with_no_well_known_exporter() -> None:
    assert DEFAULT_PORT not in (9090, 9100, 9400, 9835, 8000)


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.8.9.10") and is_loopback("::1")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("::")
    assert not is_loopback("192.0.2.1")
    assert not is_loopback("not an address")


# --- serve() in this process -------------------------------------------------------------


@dataclass
class InProcess:
    """``serve()`` on a thread of this test, stopped through a :class:`Stop`."""

    stop: Stop = field(default_factory=Stop)
    out: io.StringIO = field(default_factory=io.StringIO)
    err: io.StringIO = field(default_factory=io.StringIO)
    code: list[int] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self, address: str = "127.0.0.1:0", interval_s: float = 60.0) -> InProcess:
        def run() -> None:
            self.code.append(
                serve(
                    parse_listen(address),
                    interval_s=interval_s,
                    processes=False,
                    stop=self.stop,
                    announce=lambda line: self.out.write(line + "\n"),
                    err=self.err,
                )
            )

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        thread = self.thread
        wait_for(lambda: "/metrics" in self.out.getvalue() or not thread.is_alive())
        assert "/metrics" in self.out.getvalue(), self.err.getvalue()
        return self

    @property
    def port(self) -> int:
        return int(self.out.getvalue().split("/metrics")[0].rsplit(":", 1)[1])

    def get(self, path: str) -> tuple[int, bytes]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def wait_for_readings(self) -> None:
        wait_for(lambda: self.get("/snapshot")[0] == 200, "no readings to serve")

    def finish(self, code: int = 0) -> int:
        self.stop(code)
        assert self.thread is not None
        self.thread.join(READY_TIMEOUT_S)
        assert not self.thread.is_alive()
        return self.code[0]


@pytest.fixture
def in_process(fake_nvml: FakeNvml) -> Iterator[InProcess]:
    made = InProcess()
    yield made
    made.stop(0)
    if made.thread is not None:
        made.thread.join(READY_TIMEOUT_S)


def test_scrapes_ask_nvml_nothing_and_stopping_shuts_nvml_down(
    fake_nvml: FakeNvml, in_process: InProcess
) -> None:
    in_process.start(interval_s=60)
    in_process.wait_for_readings()
    queries = fake_nvml.device_queries(0)
    for _ in range(20):
        assert in_process.get("/metrics")[0] == 200
        assert in_process.get("/snapshot")[0] == 200

    assert fake_nvml.device_queries(0) == queries  # the scrapes asked the driver nothing
    assert fake_nvml.calls("nvmlShutdown") == 0
    assert in_process.finish(0) == 0
    assert fake_nvml.calls("nvmlShutdown") == 1
    assert in_process.err.getvalue() == ""


def test_nvml_is_shut_down_only_after_a_hung_sample_returns(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, tmp_path: Path, in_process: InProcess
) -> None:
    hang = tmp_path / "hang"
    fake_nvml_env.setenv("FAKE_NVML_HANG_FILE", str(hang))
    in_process.start(interval_s=0.25)
    in_process.wait_for_readings()
    entered = fake_nvml.calls("nvmlDeviceGetUtilizationRates", 0)
    hang.touch()
    wait_for(lambda: fake_nvml.calls("nvmlDeviceGetUtilizationRates", 0) > entered)  # stuck

    assert in_process.finish(130) == 130  # serving stops although the sampler cannot
    assert fake_nvml.calls("nvmlShutdown") == 0  # not under the hung call
    hang.unlink()
    wait_for(lambda: fake_nvml.calls("nvmlShutdown"))  # the sample returns, then NVML shuts down
    queries = fake_nvml.device_queries(0)
    sampling = {"gputui-serve-pacer", "gputui-serve-nvml"}
    wait_for(lambda: not sampling & {thread.name for thread in threading.enumerate()})
    assert fake_nvml.device_queries(0) == queries  # no sample was started after the stop


def test_a_port_in_use_is_one_line_that_says_what_to_do(fake_nvml: FakeNvml) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServeError) as caught:
            serve(ListenAddress("127.0.0.1", port), interval_s=1, processes=False, stop=Stop())
    assert str(caught.value) == (
        f"cannot listen on 127.0.0.1:{port}: another program uses that port; "
        "choose another with --listen HOST:PORT"
    )


def test_an_address_of_another_machine_is_one_line(fake_nvml: FakeNvml) -> None:
    with pytest.raises(ServeError) as caught:  # TEST-NET-1: never this machine's
        serve(ListenAddress("192.0.2.1", 0), interval_s=1, processes=False, stop=Stop())
    assert "192.0.2.1 is not an address of this machine" in str(caught.value)


@pytest.mark.parametrize("listen", ["0.0.0.0:0", ":0"])  # :PORT as the Go exporters take it
def test_every_interface_gets_a_one_line_warning(in_process: InProcess, listen: str) -> None:
    in_process.start(listen)
    assert in_process.get("/metrics")[0] == 200  # over loopback only

    warning = in_process.err.getvalue()
    assert warning.count("\n") == 1
    assert warning.startswith(f"gputui serve: warning: 0.0.0.0:{in_process.port} is reachable")
    assert "127.0.0.1" in warning
    assert in_process.finish() == 0


def test_loopback_gets_no_warning(in_process: InProcess) -> None:
    in_process.start("127.0.0.1:0")
    assert in_process.finish() == 0
    assert in_process.err.getvalue() == ""
    assert in_process.out.getvalue().startswith("gputui serve: http://127.0.0.1:")


# --- the command line, as users run it ---------------------------------------------------


@pytest.mark.parametrize(
    ("listen", "names"),
    [
        ("nowhere", "argument --listen: 'nowhere' is not HOST:PORT"),
        ("127.0.0.1:99999", "the port must be a whole number from 0 to 65535"),
        ("::1:9922", "write an IPv6 address in brackets"),
        ("192.0.2.1:0", "192.0.2.1 is not an address of this machine"),
        ("{taken}", "another program uses that port"),
    ],
)
def test_a_bad_listen_is_one_line_and_exit_2(fake_nvml_dir: Path, listen: str, names: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = listen.replace("{taken}", f"127.0.0.1:{taken.getsockname()[1]}")
        done = gputui_serve("--listen", listen, lib_dir=fake_nvml_dir)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("gputui")
    assert names in done.stderr


@pytest.mark.parametrize("port", ["--port", "--port=9000"])
def test_port_as_other_exporters_take_it_points_at_listen(port: str) -> None:
    done = gputui_serve(port, "9000", lib_dir=Path("/nonexistent"))

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"gputui serve: error: unrecognized argument {port}; did you mean --listen? "
        "(see 'gputui serve --help')\n"
    )


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (
            ["--print-rules", "--print-dashboard"],
            "argument --print-dashboard: not allowed with argument --print-rules",
        ),
        (["--print-rules", "--listen", "127.0.0.1:9922"], "--print-rules prints and exits"),
        (["--print-dashboard", "--processes"], "leave out --processes"),
        (["--interval", "5", "--print-rules"], "leave out --interval"),
        (["--print-rules", "--tls-cert", __file__, "--tls-key", __file__], "leave out --tls-cert"),
    ],
)
def test_printing_with_a_flag_of_the_server_is_one_line_and_exit_2(
    args: list[str], names: str
) -> None:
    """``--print-rules`` and ``--print-dashboard`` print and exit: a flag that shapes the
    server would do nothing, so it is refused rather than ignored."""
    done = gputui_serve(*args, lib_dir=Path("/nonexistent"))

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("gputui serve: error: ")
    assert names in done.stderr
