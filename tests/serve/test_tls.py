"""``gputui serve --tls-cert FILE --tls-key FILE``: HTTPS over loopback with a certificate
made here by ``openssl``, and the one-line errors for files that cannot serve it."""

from __future__ import annotations

import http.client
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from tests.serve.served import SCRAPE_TIMEOUT_S, StartServe, gputui_serve


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made with the openssl command."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            *subject,
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_serves_the_metrics_to_a_client_that_trusts_the_certificate(
    start_serve: StartServe, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    child = start_serve("--tls-cert", str(cert), "--tls-key", str(key))
    assert child.first_line.startswith("gputui serve: https://127.0.0.1:")

    trusting = ssl.create_default_context(cafile=str(cert))
    connection = http.client.HTTPSConnection(
        "127.0.0.1", child.port, timeout=SCRAPE_TIMEOUT_S, context=trusting
    )
    connection.request("GET", "/metrics")
    answer = connection.getresponse()
    assert answer.status == 200
    assert b"gputui_sample_age_seconds" in answer.read()
    connection.close()

    plain = http.client.HTTPConnection("127.0.0.1", child.port, timeout=SCRAPE_TIMEOUT_S)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        plain.request("GET", "/metrics")  # no plain HTTP on the TLS port
        plain.getresponse()
    plain.close()

    assert child.stop() == (0, "", "")


@pytest.mark.parametrize(
    ("case", "names"),
    [
        ("cert only", "--tls-cert needs --tls-key too"),
        ("key only", "--tls-key needs --tls-cert too"),
        ("swapped", "--tls-cert holds no PEM certificate that can be loaded"),
        ("cert not pem", "--tls-cert holds no PEM certificate that can be loaded"),
        ("key not pem", "--tls-key holds no PEM private key that can be loaded"),
        ("another key", "the --tls-key does not match the --tls-cert"),
        ("encrypted key", "give the unencrypted PEM private key"),
        ("missing", "argument --tls-cert: "),
    ],
)
def test_unusable_tls_files_are_one_line_and_exit_2(
    fake_nvml_dir: Path, certificate: tuple[Path, Path], tmp_path: Path, case: str, names: str
) -> None:
    cert, key = (str(path) for path in certificate)
    text = tmp_path / "notes.txt"
    text.write_text("not a certificate\n")
    another = tmp_path / "another.pem"
    if case == "another key":
        make_key = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
        subprocess.run(["openssl", *make_key, "-out", str(another)], check=True)
    if case == "encrypted key":
        encrypt = ["pkey", "-in", key, "-aes256", "-passout", "pass:secret"]
        subprocess.run(["openssl", *encrypt, "-out", str(another)], check=True)
    args = {
        "cert only": ["--tls-cert", cert],
        "key only": ["--tls-key", key],
        "swapped": ["--tls-cert", key, "--tls-key", cert],
        "cert not pem": ["--tls-cert", str(text), "--tls-key", key],
        "key not pem": ["--tls-cert", cert, "--tls-key", str(text)],
        "another key": ["--tls-cert", cert, "--tls-key", str(another)],
        "encrypted key": ["--tls-cert", cert, "--tls-key", str(another)],
        "missing": ["--tls-cert", str(tmp_path / "nope.pem"), "--tls-key", key],
    }[case]
    done = gputui_serve("--listen", "127.0.0.1:0", *args, lib_dir=fake_nvml_dir)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("gputui")
    assert names in done.stderr
