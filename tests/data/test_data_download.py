"""Downloads against a real HTTP server on 127.0.0.1: progress, verified write, rejected bad files."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import socket
import threading

import pytest

from damcha_ts.data import DataWarning, download_dataset, file_sha256, get_spec, locate_dataset
from damcha_ts.errors import ChecksumError, DatasetNotFoundError


class _Server:
    """Serves ``files[path]``; a path in ``truncate`` announces the full length but sends half."""

    def __init__(self, files: dict[str, bytes], truncate: set[str]):
        self.files, self.truncate, self.requests = files, truncate, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if self.path in server.truncate else body)
                self.close_connection = True

            def log_message(self, *args):  # keep the test output clean
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}{path}"


@pytest.fixture(scope="module")
def server(etth1_csv_bytes):
    corrupt = bytearray(etth1_csv_bytes)
    corrupt[200] = ord("9") if corrupt[200] != ord("9") else ord("8")
    files = {"/good.csv": etth1_csv_bytes, "/corrupt.csv": bytes(corrupt), "/truncated.csv": etth1_csv_bytes}
    running = _Server(files, truncate={"/truncated.csv"})
    running.thread.start()
    yield running
    running.httpd.shutdown()
    running.httpd.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache and no $DAMCHA_TS_DATA, so that only a download can find the file."""
    monkeypatch.delenv("DAMCHA_TS_DATA", raising=False)
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(tmp_path))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return tmp_path


def _etth1_from(*urls: str, **changes):
    return dataclasses.replace(get_spec("ETTh1"), urls=urls, **changes)


def test_download_verifies_then_writes_with_progress(server, cache, capfd, etth1_csv_bytes):
    spec = _etth1_from(server.url("/good.csv"))
    path = locate_dataset(spec)
    assert path == cache / "ETTh1.csv"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == spec.sha256 == file_sha256(path)
    assert path.read_bytes() == etth1_csv_bytes
    assert sorted(p.name for p in cache.iterdir()) == ["ETTh1.csv"]  # no temporary file left
    assert "100%" in capfd.readouterr().err  # torch's tqdm progress bar, on stderr
    before = len(server.requests)
    assert locate_dataset(spec) == path and len(server.requests) == before  # cached: no new request


@pytest.mark.parametrize("bad", ["/corrupt.csv", "/truncated.csv"])
def test_bad_download_is_rejected_and_leaves_nothing(server, cache, bad):
    spec = _etth1_from(server.url(bad))
    with pytest.raises(ChecksumError) as caught:
        locate_dataset(spec)
    message = str(caught.value)
    assert spec.sha256 in message and server.url(bad) in message and "nothing was written" in message
    assert list(cache.iterdir()) == []


def test_good_cached_file_is_never_replaced_by_a_bad_download(server, cache, etth1_csv_bytes):
    (cache / "ETTh1.csv").write_bytes(etth1_csv_bytes)
    with pytest.raises(ChecksumError):
        download_dataset(_etth1_from(server.url("/corrupt.csv")))
    assert (cache / "ETTh1.csv").read_bytes() == etth1_csv_bytes
    assert sorted(p.name for p in cache.iterdir()) == ["ETTh1.csv"]


def test_bad_cached_file_is_skipped_and_replaced_by_a_verified_download(server, cache, etth1_csv_bytes):
    (cache / "ETTh1.csv").write_bytes(etth1_csv_bytes[:1000])
    with pytest.warns(DataWarning, match="checksum mismatch"):
        path = locate_dataset(_etth1_from(server.url("/good.csv")))
    assert path.read_bytes() == etth1_csv_bytes


def test_next_url_is_tried_after_a_failure(server, cache):
    spec = _etth1_from(server.url("/missing.csv"), server.url("/corrupt.csv"), server.url("/good.csv"))
    assert file_sha256(locate_dataset(spec)) == spec.sha256
    assert server.requests[-3:] == ["/missing.csv", "/corrupt.csv", "/good.csv"]


def test_unreachable_network_lists_places_urls_and_how_to_provide(cache):
    with socket.socket() as probe:  # a port with nothing listening: connection refused
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/ETTh1.csv"
    with pytest.raises(DatasetNotFoundError) as caught:
        locate_dataset(_etth1_from(dead))
    message = str(caught.value)
    assert str(cache / "ETTh1.csv") in message and dead in message and "To provide it" in message
    assert list(cache.iterdir()) == []


def test_without_a_digest_the_shape_catches_truncation(server, cache):
    spec = _etth1_from(server.url("/truncated.csv"), sha256=None)
    with pytest.raises(ChecksumError, match="expected 17420 rows x 7 variates"):
        download_dataset(spec)
    assert list(cache.iterdir()) == []
    with pytest.warns(DataWarning, match="without checksum verification"):
        path = download_dataset(_etth1_from(server.url("/good.csv"), sha256=None))
    assert file_sha256(path) == get_spec("ETTh1").sha256
