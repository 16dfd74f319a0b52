"""The rules every settings file obeys (damcha_ts/schema.py): unknown keys, YAML scalars, shipped files."""

from __future__ import annotations

from pathlib import Path

import pytest

from damcha_ts.errors import ConfigError
from damcha_ts.schema import (
    SHIPPED_ROOT,
    available_shipped,
    coerce,
    find_shipped,
    load_shipped,
    plain_values,
    reject_unknown_keys,
    yaml_number,
)


def test_an_unknown_key_is_named_with_its_place_and_the_close_valid_names():
    with pytest.raises(ConfigError, match=r"^unknown key 'training\.max_epoch'; did you mean max_epochs\? "
                                          r"\(valid keys: max_epochs, patience\)$"):
        reject_unknown_keys({"patience": 1, "max_epoch": 3}, ["max_epochs", "patience"], "training")
    with pytest.raises(ConfigError, match=r"^grid\.yaml: unknown key 'models\[0\]\.lable'; did you mean label\?"):
        reject_unknown_keys(["lable"], ["name", "label"], "models[0]", source="grid.yaml")
    with pytest.raises(ConfigError, match=r"unknown key 'zzz' \(valid"):  # nothing close: no suggestion
        reject_unknown_keys(["zzz"], ["name", "label"], "")
    reject_unknown_keys({"name": 1}, ["name"], "x")  # known keys pass


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [("1e-4", float, 1e-4), ("3", int, 3), (3.0, int, 3), ("true", bool, True), ("null", int | None, None),
     (None, float | None, None), (2, float, 2.0), ("auto", int | str, "auto"), ("4", int | str, 4)],
)
def test_yaml_and_command_line_scalars_become_the_annotated_type(value, annotation, expected):
    result = coerce(value, annotation, "training.x")
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(("value", "annotation"), [("abc", float), (2.5, int), (True, int), (None, int), ("yes", bool)])
def test_a_value_of_the_wrong_type_is_refused_with_the_key_named(value, annotation):
    with pytest.raises(ConfigError, match=r"training\.x"):
        coerce(value, annotation, "training.x")


def test_yaml_number_reads_numbers_written_as_text_and_leaves_the_rest():
    assert yaml_number("1e-4") == 1e-4 and yaml_number("12") == 12 and type(yaml_number("12")) is int
    assert yaml_number("auto") == "auto" and yaml_number(3) == 3


def test_plain_values_round_trip_paths_tuples_and_timestamps_to_yaml_data():
    import datetime

    assert plain_values({"a": (1, Path("x/y")), "b": datetime.date(2020, 1, 2)}) == {"a": [1, "x/y"], "b": "2020-01-02"}


@pytest.mark.parametrize(
    ("kind", "name", "relative"),
    [("config", "itransformer_damcha/etth1", "itransformer_damcha/etth1.yaml"), ("grid", "ett", "leaderboard/ett.yaml"),
     ("grid", "leaderboard/ett", "leaderboard/ett.yaml"),
     ("search", "itransformer_attention", "search/itransformer_attention.yaml")],
)
def test_shipped_files_are_found_by_name(kind, name, relative):
    assert find_shipped(kind, name) == SHIPPED_ROOT / relative
    path, content = load_shipped(kind, name)
    assert path == SHIPPED_ROOT / relative and isinstance(content, dict)


def test_listing_shipped_files_separates_run_configs_from_grids_and_searches():
    configs, grids = available_shipped("config"), available_shipped("grid")
    assert "itransformer_mha/etth1" in configs and "ett" in grids
    assert not any(name.startswith(("_base", "leaderboard", "search")) for name in configs)
    # Every file on disk is listed under exactly one kind (bases excepted).
    on_disk = {p.relative_to(SHIPPED_ROOT).with_suffix("").as_posix() for p in SHIPPED_ROOT.rglob("*.yaml")}
    listed = {*configs, *(f"leaderboard/{g}" for g in grids), *(f"search/{s}" for s in available_shipped("search"))}
    assert on_disk - listed == {p for p in on_disk if p.startswith("_base/")}


def test_a_missing_file_suggests_close_shipped_names_and_a_path_wins(tmp_path):
    with pytest.raises(ConfigError, match=r"neither a file nor a shipped leaderboard grid; did you mean ett\?"):
        find_shipped("grid", "etf")
    own = tmp_path / "ett"
    own.write_text("name: mine\n")
    assert find_shipped("grid", own) == own


def test_invalid_yaml_is_an_error_naming_the_file(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: not valid YAML"):
        load_shipped("search", broken)
