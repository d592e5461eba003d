"""The gRPC server's life in the process: over TLS when configured, refused at startup when its
TLS files are not usable, and drained on SIGTERM like HTTP (health NOT_SERVING, an open stream
ended at an event boundary with its last position in the trailers)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import signal
import socket
import subprocess
from pathlib import Path

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.harness import ServerProcess, free_port, server_command
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(90)

METADATA = (("a2a-version", "1.0"),)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_server(fake_llm, tls_files):
    cert, key = tls_files
    port = free_port()
    env = {"A2A_GRPC_PORT": str(port), "A2A_GRPC_TLS_CERT": str(cert), "A2A_GRPC_TLS_KEY": str(key)}
    with ServerProcess(fake_llm.base_url, env=env).running() as proc:
        proc.grpc_target = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
        yield proc


async def test_over_tls_a_client_that_trusts_the_certificate_is_served(
    tls_server, tls_files, fake_llm, marker
):
    fake_llm.script(text("Over TLS.", when_user_contains=marker))
    credentials = grpc.ssl_channel_credentials(root_certificates=tls_files[0].read_bytes())
    async with grpc.aio.secure_channel(tls_server.grpc_target, credentials) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        request = a2a_pb2.SendMessageRequest(
            message=a2a_pb2.Message(
                message_id=marker, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=marker)]
            )
        )
        task = (await stub.SendMessage(request, metadata=METADATA)).task
    assert task.artifacts[0].parts[0].text == "Over TLS."
    async with grpc.aio.insecure_channel(tls_server.grpc_target) as channel:  # plaintext: no
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(
                a2a_pb2.ListTasksRequest(), metadata=METADATA, timeout=5
            )
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("missing", ["key", "file"])
def test_unusable_tls_settings_stop_the_server_at_startup(tls_files, tmp_path, missing):
    cert, key = tls_files
    scratch = ServerProcess("http://127.0.0.1:9")  # for its environment only
    scratch.cleanup()
    env = {
        **scratch.environment(),
        "A2A_GRPC_PORT": str(free_port()),
        "A2A_GRPC_TLS_CERT": str(cert if missing == "key" else tmp_path / "absent.pem"),
        **({"A2A_GRPC_TLS_KEY": str(key)} if missing == "file" else {}),
    }
    result = subprocess.run(
        server_command(free_port()), env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "A2A_GRPC_TLS" in result.stderr or "TLS" in result.stderr
    assert "Traceback" not in result.stderr


async def test_sigterm_ends_an_open_stream_with_its_last_position_and_health_says_so(
    fake_llm, marker
):
    port = free_port()
    target = f"127.0.0.1:{port}"
    server = ServerProcess(fake_llm.base_url, env={"A2A_GRPC_PORT": str(port)}).start()
    try:
        fake_llm.script(
            text([f"w{n} " for n in range(200)], chunk_delay=0.1, when_user_contains=marker)
        )
        async with grpc.aio.insecure_channel(target) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            request = a2a_pb2.SendMessageRequest(
                message=a2a_pb2.Message(
                    message_id=marker, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=marker)]
                )
            )
            stream = stub.SendStreamingMessage(request, metadata=METADATA)
            first = int(dict(await stream.initial_metadata())["a2a-first-event-id"])
            received = []
            async for event in stream:
                received.append(event)
                if len(received) == 5:
                    assert server.proc is not None
                    server.proc.send_signal(signal.SIGTERM)
            # The stream ended by itself, cleanly, at an event boundary, and says where.
            assert await stream.code() == grpc.StatusCode.OK
            trailing = dict(await stream.trailing_metadata())
            assert int(trailing["a2a-last-event-id"]) == first + len(received) - 1
            assert len(received) < 200
            try:
                answer = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
            except grpc.aio.AioRpcError as exc:  # or already gone
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
        assert server.proc is not None
        # Gone within the grace (uvicorn ends by raising the signal it caught: -SIGTERM).
        assert await asyncio.to_thread(server.proc.wait, 30) in (0, -signal.SIGTERM)
    finally:
        server.cleanup()


def test_a_grpc_port_in_use_stops_the_server_at_startup_saying_so(tmp_path):
    scratch = ServerProcess("http://127.0.0.1:9")  # for its environment only
    scratch.cleanup()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**scratch.environment(), "A2A_GRPC_PORT": str(port)}
        result = subprocess.run(
            server_command(free_port()), env=env, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 3, result.stderr[-2000:]
    assert f"cannot serve gRPC on 127.0.0.1:{port} (A2A_GRPC_PORT)" in result.stderr
