"""The local S3 server the tests write object storage through (tests/kit/s3_server.py) works.

fsspec/s3fs writes and reads through its fault-injecting proxy, which counts, refuses, slows
and drops requests on demand; a Lightning fit logs to ``s3://`` there and a real TensorBoard
reads that run back.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import fsspec
import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from tests.kit.models import TinyClassifier, loaders, trainer
from tests.kit.s3_server import LocalS3, local_s3
from tests.kit.tb_server import tensorboard

pytest_plugins = ["tests.kit.s3_server"]  # its fixtures: s3_endpoint, s3_env, s3_fail_fast


def test_s3fs_writes_and_reads_an_object_through_the_proxy(s3_env: LocalS3) -> None:
    bucket = s3_env.bucket()
    with fsspec.open(f"s3://{bucket}/runs/hello.txt", "wb") as f:
        f.write(b"hello, object storage")

    assert s3_env.requests["PUT"] == 1
    assert ("PUT", f"/{bucket}/runs/hello.txt") in s3_env.requests.seen
    assert s3_env.requests.bytes_in >= len(b"hello, object storage")
    fs = fsspec.filesystem("s3")
    assert fs.cat(f"{bucket}/runs/hello.txt") == b"hello, object storage"
    assert fs.ls(f"{bucket}/runs") == [f"{bucket}/runs/hello.txt"]
    assert s3_env.requests["GET"] >= 1
    # The bucket helper talks to moto directly: nothing of it is counted.
    s3_env.requests.reset()
    s3_env.bucket()
    assert s3_env.requests.total == 0


def test_a_large_object_goes_through_whole(s3_env: LocalS3) -> None:
    bucket = s3_env.bucket()
    data = bytes(range(256)) * (3 * 4096)  # 3 MiB
    fs = fsspec.filesystem("s3")
    fs.pipe(f"{bucket}/big", data)
    assert s3_env.requests.bytes_in >= len(data)
    assert fs.cat(f"{bucket}/big") == data
    assert fs.cat_file(f"{bucket}/big", start=1000, end=1010) == data[1000:1010]


def test_a_refused_write_fails_quickly_and_works_again_after_clear(s3_fail_fast: LocalS3) -> None:
    s3 = s3_fail_fast
    bucket = s3.bucket()
    s3.faults.refuse(503, "SlowDown", methods={"PUT"})
    with (
        pytest.raises(OSError, match="reduce your request rate"),
        fsspec.open(f"s3://{bucket}/refused", "wb") as f,
    ):
        f.write(b"x")
    # One PUT. With the default retries (s3_env alone) the same write takes about 30 s:
    # botocore makes 5 attempts and s3fs retries SlowDown 5 times, 25 PUTs in all.
    assert s3.requests["PUT"] == 1
    assert s3.requests.refused == 1

    s3.faults.clear()
    with fsspec.open(f"s3://{bucket}/refused", "wb") as f:
        f.write(b"x")
    assert fsspec.filesystem("s3").cat(f"{bucket}/refused") == b"x"


def test_a_refusal_for_a_number_of_times_is_retried_away(s3_env: LocalS3) -> None:
    bucket = s3_env.bucket()
    s3_env.faults.refuse(500, "InternalError", times=1, match="/flaky$")
    fsspec.filesystem("s3").pipe(f"{bucket}/flaky", b"x")  # botocore retries once (under 1 s)
    assert s3_env.requests.refused == 1
    assert s3_env.requests["PUT"] == 2
    assert not s3_env.faults.active


def test_refused_requests_get_s3_errors_that_botocore_reads(s3_env: LocalS3) -> None:
    from botocore.exceptions import ClientError

    bucket = s3_env.bucket()
    client = s3_env.client(max_attempts=1)
    client.put_object(Bucket=bucket, Key="k", Body=b"v")
    s3_env.faults.refuse(403, "AccessDenied", methods={"GET", "HEAD"})
    with pytest.raises(ClientError) as caught:
        client.get_object(Bucket=bucket, Key="k")
    assert caught.value.response["Error"]["Code"] == "AccessDenied"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as caught:  # HEAD: no body, botocore reads the status
        client.head_object(Bucket=bucket, Key="k")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    s3_env.faults.clear()
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    client.close()


def test_a_slowed_request_takes_that_long(s3_env: LocalS3) -> None:
    bucket = s3_env.bucket()
    fs = fsspec.filesystem("s3")
    fs.pipe(f"{bucket}/x", b"x")
    s3_env.faults.slow(0.5, times=1, methods={"GET"}, match=f"/{bucket}/x$")
    started = time.monotonic()
    assert fs.cat(f"{bucket}/x") == b"x"
    slowed = time.monotonic() - started
    assert slowed >= 0.5  # at least the delay asked for (how much more is the machine's)
    assert not s3_env.faults.active


def test_a_dropped_connection_is_a_network_error(s3_fail_fast: LocalS3) -> None:
    from botocore.exceptions import ConnectionClosedError

    bucket = s3_fail_fast.bucket()
    fs = fsspec.filesystem("s3")
    fs.pipe(f"{bucket}/x", b"x")
    s3_fail_fast.requests.reset()
    s3_fail_fast.faults.drop(methods={"GET"}, match=f"/{bucket}/x$")
    with pytest.raises(ConnectionClosedError):
        fs.cat(f"{bucket}/x")
    # aiohttp sends a request again when a kept-alive connection closes unanswered (once per
    # pooled connection: 2 here, 4 seen under load).
    dropped = s3_fail_fast.requests.dropped
    assert dropped >= 2
    s3_fail_fast.faults.clear()
    s3_fail_fast.faults.drop(times=1, methods={"GET"}, match=f"/{bucket}/x$")
    assert fs.cat(f"{bucket}/x") == b"x"  # so even without retries one drop goes unseen
    assert s3_fail_fast.requests.dropped == dropped + 1


def _get(client: Any, bucket: str, key: str, errors: list[Exception]) -> None:
    try:
        client.get_object(Bucket=bucket, Key=key)
    except Exception as error:
        errors.append(error)


def test_stopping_the_servers_leaves_no_thread_running() -> None:
    before = set(threading.enumerate())
    with local_s3() as s3:
        ports = {s3.url.rsplit(":", 1)[1], s3.moto_url.rsplit(":", 1)[1]}
        bucket = s3.bucket()
        client = s3.client(max_attempts=1)
        s3.faults.slow(30, match="/slow$")  # a request still waiting when the servers stop
        client.put_object(Bucket=bucket, Key="k", Body=b"v")
        errors: list[Exception] = []
        waiting = threading.Thread(target=_get, args=(client, bucket, "slow", errors))
        waiting.start()
        while s3.requests["GET"] == 0:
            time.sleep(0.01)
    waiting.join(10)
    client.close()
    assert errors  # its connection was shut: the client saw an error, not an answer
    # This server's threads (the session's own server may take connections meanwhile):
    left = [
        thread
        for thread in set(threading.enumerate()) - before
        if thread.name in ("moto server", "s3 proxy") or any(p in thread.name for p in ports)
    ]
    assert left == []


def test_a_lightning_fit_logs_to_s3_and_tensorboard_reads_it_back(
    s3_env: LocalS3, tmp_path: Path
) -> None:
    bucket = s3_env.bucket()
    logdir = f"s3://{bucket}/tb"
    train, val = loaders()
    trainer(tmp_path, TensorBoardLogger(logdir), [], max_epochs=1).fit(TinyClassifier(), train, val)

    files = fsspec.filesystem("s3").find(f"{bucket}/tb")
    assert any("/lightning_logs/version_0/events.out.tfevents." in name for name in files), files
    assert f"{bucket}/tb/lightning_logs/version_0/hparams.yaml" in files

    # TensorBoard (no TensorFlow) reads s3:// with boto3, pointed here by S3_ENDPOINT.
    with tensorboard(logdir) as server:
        runs = server.wait_for("/data/runs", lambda runs: runs, timeout=30)
        assert runs == ["lightning_logs/version_0"]
        scalars = server.wait_for(
            "/data/plugin/scalars/tags", lambda tags: tags.get("lightning_logs/version_0")
        )
    assert "train_loss" in scalars["lightning_logs/version_0"]
