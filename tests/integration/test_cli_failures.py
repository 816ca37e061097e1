"""A failure from each layer, as a user meets it on the command line: one line naming what
failed and how to fix it, exit 2, no traceback (credentials, permission, a missing bucket,
the network, a bad path, a typo in a command, an id or a flag)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.s3


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def env(tmp_path):
    """No AWS credentials from anywhere (environment, files, instance metadata)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    e.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none"),
             AWS_EC2_METADATA_DISABLED="true", RAYFORM_CACHE_DIR=str(tmp_path / "cache"))
    return e


def _one_line(r: subprocess.CompletedProcess, *words: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and lines[0].startswith("rayform"), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_no_credentials(s3_store_url, env):
    url, options = s3_store_url
    r = _cli("--store", url, "-o", f"endpoint_url={options['endpoint_url']}", "slices", "ls", env=env)
    _one_line(r, "NoCredentialsError", "Set AWS credentials")


def test_permission_denied(s3_store_url, s3_endpoint, env):
    url, options = s3_store_url
    bucket = url[len("s3://"):].split("/", 1)[0]
    s3_endpoint.fail_gets(bucket, 1000, status=403)
    try:
        r = _cli("--store", url, *(f"-o{k}={v}" for k, v in options.items()), "slices", "ls", env=env)
    finally:
        s3_endpoint.fail_gets(bucket, 0)
    _one_line(r, "PermissionError", "permissions")


def test_a_missing_bucket(s3_endpoint, env):
    opts = [f"-o{k}={v}" for k, v in s3_endpoint.storage_options.items()]
    _one_line(_cli("--store", "s3://no-such-bucket-anywhere/x", *opts, "segments", "ls", env=env), "no such bucket")


def test_the_network(env):
    opts = [f"-oendpoint_url=http://127.0.0.1:{_closed_port()}", "-okey=k", "-osecret=s"]
    _one_line(_cli("--store", "s3://bucket/x", *opts, "slices", "ls", env=env), "EndpointConnectionError",
              "Check the endpoint URL and the network")


def test_a_bad_path(tmp_path, env):
    (tmp_path / "file").write_text("not a directory")
    _one_line(_cli("--store", str(tmp_path / "file" / "store"), "slices", "ls", env=env), "no such directory")
    _one_line(_cli("--store", str(tmp_path / "file" / "store"), "demo", env=env), "cannot write")
    _one_line(_cli("--store", str(tmp_path / "s"), "push", "slc_00000000", str(tmp_path / "d"), env=env),
              "no such directory")
    (tmp_path / "s").mkdir()
    _one_line(_cli("--store", str(tmp_path / "s"), "push", "slc_00000000", str(tmp_path / "d"), env=env),
              "no such slice")


@pytest.mark.parametrize("args, words", [
    (["slices", "shwo"], ["invalid choice: 'shwo'", "See: rayform slices --help"]),
    (["pack", "--fps", "15"], ["required: slice", "See: rayform pack --help"]),
    (["slices", "ls", "--stroe", "x"], ["unrecognized arguments: --stroe x"]),
    (["show", "slc_0000"], ["not a slice id"]),
    (["gc", "--grace", "an hour"], ["duration 'an hour'"]),
    (["push", "slc_00000000", "nosuchproto://bucket"], ["nosuchproto://bucket"]),
])
def test_a_typo(args, words, tmp_path, env):
    (tmp_path / "store").mkdir()
    _one_line(_cli("--store", str(tmp_path / "store"), *args, env=env), *words)
