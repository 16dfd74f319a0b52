"""Registry entries, name lookup, sha256 verification of the shared files and of corrupted copies."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import sys

import pytest

from damcha_ts.data import (
    DATASETS,
    DataWarning,
    checksum_status,
    file_sha256,
    get_spec,
    load_frame,
    locate_dataset,
    verify_file,
)
from damcha_ts.errors import ChecksumError, ConfigError, DatasetNotFoundError

# The benchmark files present in $DAMCHA_TS_DATA (../shared/data), gzip copies of the canonical CSVs.
SHARED = ("ETTh1", "ETTh2", "ETTm1", "ETTm2", "Weather")

# Shapes and split kinds as docs/protocol.md §1.1-1.2 states them (the independent reference).
PROTOCOL_TABLE = {
    "ETTh1": (17420, 7, "h", "ett_hour"),
    "ETTh2": (17420, 7, "h", "ett_hour"),
    "ETTm1": (69680, 7, "15min", "ett_minute"),
    "ETTm2": (69680, 7, "15min", "ett_minute"),
    "Weather": (52696, 21, "10min", "custom"),
    "Traffic": (17544, 862, "h", "custom"),
    "Electricity": (26304, 321, "h", "custom"),
    "Exchange": (7588, 8, "D", "custom"),
}


def test_registry_matches_protocol_table():
    assert set(DATASETS) == set(PROTOCOL_TABLE)
    for name, (rows, variates, freq, split) in PROTOCOL_TABLE.items():
        spec = DATASETS[name]
        assert (spec.n_rows, spec.n_variates, spec.freq, spec.split, spec.target) == (rows, variates, freq, split, "OT")
        assert spec.urls and all(url.startswith("https://") for url in spec.urls)
    assert all("zhouhaoyi/ETDataset" in get_spec(n).urls[0] for n in ("ETTh1", "ETTh2", "ETTm1", "ETTm2"))
    assert all("thuml/Time-Series-Library" in get_spec(n).urls[0] for n in ("Weather", "Traffic", "Electricity", "Exchange"))
    # Reference digests from ../shared/data/README.md for the two files not shipped there.
    assert get_spec("Traffic").sha256 == "cb06463d56fa17d87f47027cd9389ceae82a69eddee51cdb61480e120dab0b16"
    assert get_spec("Electricity").sha256 == "7e45845d54c5219bad0ae6bc1b5316cf8ff9cead5d33fa998a5a51c2e4a497ad"
    assert get_spec("Exchange").sha256 is None


def test_names_are_case_insensitive_with_aliases():
    assert get_spec("etth1").name == "ETTh1"
    assert get_spec("WEATHER").name == "Weather"
    assert get_spec("ecl").name == "Electricity"
    assert get_spec("electricity").name == "Electricity"
    assert get_spec("exchange_rate").name == "Exchange"


@pytest.mark.parametrize(("typo", "suggestion"), [("ETTh3", "ETTh1"), ("wether", "Weather"), ("trafic", "Traffic")])
def test_unknown_name_suggests_close_names(typo, suggestion):
    with pytest.raises(ConfigError, match=rf"unknown dataset '{typo}'.*Did you mean.*'{suggestion}'"):
        get_spec(typo)
    with pytest.raises(ConfigError, match="Did you mean"):
        load_frame(typo)


@pytest.mark.parametrize("name", SHARED)
def test_shared_file_sha256_is_verified(name, data_root):
    path = data_root / (get_spec(name).filename + ".gz")
    independent = hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
    assert file_sha256(path) == independent == get_spec(name).sha256
    assert verify_file(path, name) == independent
    assert checksum_status(path, name)["status"] == "verified"
    assert locate_dataset(name, download=False) == path


def _corrupt_copy(source, destination):
    """``destination``: ``source`` (a .csv.gz) with one digit of the first data row changed."""
    text = gzip.decompress(source.read_bytes())
    header_end = text.index(b"\n") + 1
    digit = header_end + text[header_end:].index(b",") + 1  # first value of the first data row
    changed = text[:digit] + (b"1" if text[digit : digit + 1] != b"1" else b"2") + text[digit + 1 :]
    destination.write_bytes(gzip.compress(changed))
    return hashlib.sha256(changed).hexdigest()


def test_corrupted_copy_is_rejected_naming_both_digests(data_root, tmp_path):
    bad = tmp_path / "ETTh1.csv.gz"
    actual = _corrupt_copy(data_root / "ETTh1.csv.gz", bad)
    expected = get_spec("ETTh1").sha256
    with pytest.raises(ChecksumError) as caught:
        locate_dataset("ETTh1", bad, download=False)
    assert expected in str(caught.value) and actual in str(caught.value) and str(bad) in str(caught.value)
    with pytest.raises(ChecksumError):
        load_frame("ETTh1", path=bad, download=False)
    assert checksum_status(bad, "ETTh1")["status"] == "mismatch"


def test_search_skips_a_corrupted_copy_and_reports_it(data_root, tmp_path, monkeypatch):
    _corrupt_copy(data_root / "ETTh1.csv.gz", tmp_path / "ETTh1.csv.gz")
    monkeypatch.setenv("DAMCHA_TS_DATA", str(tmp_path))
    with pytest.warns(DataWarning, match="checksum mismatch"), pytest.raises(ChecksumError, match="rejected"):
        locate_dataset("ETTh1", download=False)
    # A good copy further down the search order (the cache) is used instead.
    cache = tmp_path / "cache"
    (cache / "ETT-small").mkdir(parents=True)
    shutil.copy(data_root / "ETTh1.csv.gz", cache / "ETT-small" / "ETTh1.csv.gz")
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(cache))
    with pytest.warns(DataWarning, match="checksum mismatch"):
        assert locate_dataset("ETTh1", download=False) == cache / "ETT-small" / "ETTh1.csv.gz"


def test_a_cut_off_gzip_copy_is_skipped_like_a_corrupted_one(data_root, tmp_path, monkeypatch):
    cut = tmp_path / "data" / "ETTh1.csv.gz"
    cut.parent.mkdir()
    cut.write_bytes((data_root / "ETTh1.csv.gz").read_bytes()[:200_000])  # a download that stopped
    assert checksum_status(cut, "ETTh1")["status"] == "unreadable"
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(data_root / "ETTh1.csv.gz", cache / "ETTh1.csv.gz")
    monkeypatch.setenv("DAMCHA_TS_DATA", str(cut.parent))
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(cache))
    with pytest.warns(DataWarning, match="cannot be read"):
        assert locate_dataset("ETTh1", download=False) == cache / "ETTh1.csv.gz"


def test_a_folder_with_a_bad_and_a_good_copy_gives_the_good_one(data_root, tmp_path):
    _corrupt_copy(data_root / "ETTh1.csv.gz", tmp_path / "ETTh1.csv")  # found first, does not verify
    shutil.copy(data_root / "ETTh1.csv.gz", tmp_path / "ETTh1.csv.gz")
    with pytest.warns(DataWarning, match="checksum mismatch"):
        assert locate_dataset("ETTh1", path=tmp_path) == tmp_path / "ETTh1.csv.gz"


def test_a_download_that_does_not_verify_is_reported_with_the_search(tmp_path, monkeypatch):
    from damcha_ts.data import storage

    monkeypatch.setenv("DAMCHA_TS_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(tmp_path / "cache"))

    def bad_download(spec):
        raise ChecksumError(f"{spec.name}: the downloaded file does not verify")

    monkeypatch.setattr(storage, "download_dataset", bad_download)
    with pytest.raises(ChecksumError, match=r"(?s)Searched:.*does not verify"):
        locate_dataset("ETTh1", download=True)


def test_missing_file_lists_every_place_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("DAMCHA_TS_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetNotFoundError) as caught:
        locate_dataset("Traffic", download=False)
    message = str(caught.value)
    assert str(tmp_path / "nowhere" / "traffic.csv") in message
    assert str(tmp_path / "nowhere" / "traffic" / "traffic.csv.gz") in message
    assert "cache" in message and "download=False" in message and "To provide it" in message
    with pytest.raises(DatasetNotFoundError, match="no such file"):
        locate_dataset("ETTh1", tmp_path / "missing.csv")


def test_exchange_without_digest_is_checked_by_shape_and_warns(tmp_path):
    # Stand-in files of the right name: only the "no digest" path is under test here.
    path = tmp_path / "exchange_rate.csv"
    rows = [f"1990/1/{1 + i % 28} 0:00," + ",".join(["0.5"] * 8) for i in range(7588)]
    path.write_text("date,0,1,2,3,4,5,6,OT\n" + "\n".join(rows) + "\n")
    with pytest.warns(DataWarning, match="cannot be verified beyond its shape"):
        assert locate_dataset("Exchange", path) == path
    assert checksum_status(path, "Exchange")["status"] == "unverifiable"
    path.write_text("date,0,1,2,3,4,5,6,OT\n" + "\n".join(rows[:5000]) + "\n")  # cut off
    with pytest.raises(ChecksumError, match="expected 7588 rows x 8 variates, got 5000 rows"):
        locate_dataset("Exchange", path)


def test_importing_the_data_package_stays_light():
    code = "import sys, damcha_ts.data; print(sorted(m for m in ('torch', 'lightning', 'gluonts', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
