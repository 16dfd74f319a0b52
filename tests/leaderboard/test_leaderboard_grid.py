"""The grid file is data: which cells it plans, in which order, and the run filters."""

from __future__ import annotations

from pathlib import Path

import pytest

from damcha_ts.leaderboard.grid import load_grid

ETT = Path(__file__).resolve().parents[2] / "configs" / "leaderboard" / "ett.yaml"


def test_ett_grid_plans_the_issue_cells():
    grid = load_grid(ETT)
    cells = grid.cells()
    neural = [c for c in cells if not c.is_naive]
    # per dataset and horizon: 3 + 3 iTransformer seeds on ETTh1/ETTh2, one seed of each model on ETTm
    assert len(neural) == 4 * (8 + 8 + 4 + 4)
    assert len(cells) - len(neural) == 4 * 4 * 2  # two naive rows per dataset and horizon
    assert all(c.is_naive for c in cells[: len(cells) - len(neural)])  # seconds each, so first
    keys = {(c.dataset, c.model, c.horizon, c.seed) for c in cells}
    assert len(keys) == len(cells)
    assert ("ETTh1", "itransformer_damcha", 720, 2025) in keys
    assert ("ETTm2", "gateformer_mha", 96, 2021) in keys


def test_first_seed_rows_come_before_further_seeds():
    etth1 = [c for c in load_grid(ETT).cells(("ETTh1",)) if not c.is_naive]
    first_repeat = next(i for i, c in enumerate(etth1) if c.seed == 2024)
    assert {(c.model, c.horizon) for c in etth1[:first_repeat]} == {
        (m, h) for m in ("itransformer_mha", "itransformer_damcha", "gateformer_mha", "gateformer_damcha")
        for h in (96, 192, 336, 720)
    }


def test_only_models_keeps_those_rows_in_the_same_order():
    grid = load_grid(ETT)
    chosen = ("itransformer_mha", "itransformer_damcha")
    kept = grid.cells(("ETTm1", "ETTm2"), chosen)
    everything = [c for c in grid.cells(("ETTm1", "ETTm2")) if c.model in chosen]
    assert kept == everything and len(kept) == 2 * 4 * 2
    naive_only = grid.cells((), ("repeat_last",))
    assert {c.model for c in naive_only} == {"repeat_last"} and len(naive_only) == 4 * 4
    assert grid.model_labels == ("repeat_last", "window_mean", "itransformer_mha", "itransformer_damcha",
                                 "gateformer_mha", "gateformer_damcha")


def test_compare_with_names_known_models_and_reaches_the_report_cells(tmp_path):
    from damcha_ts.errors import ConfigError
    from damcha_ts.leaderboard.runner import expected_cells

    ablations = load_grid(ETT.parent / "ablations.yaml")
    assert ablations.compare_with == ("itransformer_mha", "itransformer_damcha")
    cells = expected_cells(ablations, tmp_path)
    assert cells and all(c.compare_with == ablations.compare_with for c in cells)
    assert load_grid(ETT).compare_with == ()

    bad = tmp_path / "bad.yaml"
    bad.write_text(ETT.read_text() + "compare_with: [itransformer_mah]\n")
    with pytest.raises(ConfigError, match="compare_with 'itransformer_mah'"):
        load_grid(bad)


@pytest.mark.parametrize("path", sorted(ETT.parent.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_grid_resolves_every_cell(path, tmp_path):
    """A grid is ready to run: each cell's config, overrides and all, loads and hashes."""
    from damcha_ts.leaderboard.cells import resolve_cell

    grid = load_grid(path)
    resolved = [resolve_cell(cell, grid, tmp_path) for cell in grid.cells()]
    neural = [r for r in resolved if not r.cell.is_naive]
    assert neural and all(r.config_hash for r in neural)
    # One distinct config per cell: no two labels of a grid silently train the same run.
    assert len({r.config_hash for r in neural}) == len(neural)


def test_shipped_grids_load_by_name_and_are_not_run_configs():
    from damcha_ts.errors import ConfigError
    from damcha_ts.training import available_configs

    assert load_grid("ett").path == load_grid("leaderboard/ett").path == load_grid(ETT).path
    with pytest.raises(ConfigError, match=r"leaderboard grid 'etth' is neither a file nor a shipped leaderboard grid; "
                                          r"did you mean ett\b"):
        load_grid("etth")
    with pytest.raises(ConfigError, match=r"leaderboard grid 'zzzz' is neither a file .*\(shipped: ablations, .*ett"):
        load_grid("zzzz")
    assert not [name for name in available_configs() if name.startswith(("leaderboard/", "search/"))]


GOOD = """name: mine
horizons: [96, 192]
seeds: [2021]
naive: [repeat_last]
models:
  - name: itransformer_mha
datasets:
  ETTh1: {}
"""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("horizons: [96, 192]", "horizons: [96, 192"), r"bad\.yaml: not valid YAML"),
        (("ETTh1: {}", "ETTh1: {seeds: [2021]}"), r"datasets\.ETTh1\.seeds \(per model label\): expected a mapping"),
        (("ETTh1: {}", "ETTh1: 5"), r"datasets\.ETTh1: expected a mapping, got 5"),
        (("datasets:\n  ETTh1: {}", "datasets: [{ETTh1: {}}]"), r"'datasets' as a list must hold dataset names"),
        (("ETTh1: {}", "ETTh1: {}\n  etth1: {}"), r"datasets\.etth1: ETTh1 is listed twice"),
        (("  - name: itransformer_mha", "  - name: itransformer_mha\n    config: configs/{modle}/x.yaml"),
         r"models\[0\]\.config: 'configs/\{modle\}/x\.yaml' may only use \{model\}"),
        (("  - name: itransformer_mha", "  - name: itransformer_mha\n    overrides: model.d_model=16"),
         r"models\[0\]\.overrides: expected a list of strings, got 'model\.d_model=16'"),
        (("naive: [repeat_last]", "naive: repeat_last"), r"naive: expected a list of strings"),
        (("horizons: [96, 192]", "horizons: [96, 96]"), r"horizons: \[96, 96\] lists a value twice"),
        (("horizons: [96, 192]", "horizons: [0, 96]"), r"horizons: expected a non-empty list of integers ≥ 1"),
        (("horizons: [96, 192]", "horizons: [true]"), r"horizons: expected a non-empty list of integers"),
        (("name: mine", "name: ../../elsewhere"), r"name: '\.\./\.\./elsewhere' may only use letters"),
        (("  - name: itransformer_mha", "  - name: itransformer_mha\n    label: repeat_last"),
         r"label\(s\) \['repeat_last'\] appear twice \(or name a naive method\)"),
        (("models:\n  - name: itransformer_mha", "models: itransformer_mha"), r"'models' must be a non-empty list"),
        (("horizons: [96, 192]", "horizon: [96, 192]"),
         r"bad\.yaml: unknown key 'horizon'; did you mean horizons\? \(valid keys: name, description, horizons,"),
        (("  - name: itransformer_mha", "  - name: itransformer_mha\n    lable: mine"),
         r"bad\.yaml: unknown key 'models\[0\]\.lable'; did you mean label\? \(valid keys: name, label, config,"),
        (("ETTh1: {}", "ETTh1: {seed: {itransformer_mha: [1]}}"),
         r"bad\.yaml: unknown key 'datasets\.ETTh1\.seed'; did you mean seeds\? \(valid keys: seeds\)"),
    ],
    ids=["yaml-syntax", "dataset-seeds-list", "dataset-options-number", "datasets-list-of-mappings",
         "dataset-twice", "template-typo", "overrides-string", "naive-string", "horizon-twice", "horizon-zero",
         "horizon-bool", "name-escapes-folder", "label-is-naive", "models-string", "unknown-grid-key",
         "unknown-model-key", "unknown-dataset-key"],
)
def test_a_bad_grid_file_is_refused_with_the_file_and_key_named(tmp_path, change, message):
    from damcha_ts.errors import ConfigError

    old, new = change
    assert old in GOOD
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    assert load_grid(good).cells()  # the unchanged file loads
    bad.write_text(GOOD.replace(old, new))
    with pytest.raises(ConfigError, match=message):
        load_grid(bad)


def test_a_grid_kept_outside_the_project_uses_the_shipped_run_configs(tmp_path):
    (tmp_path / "configs" / "itransformer_mha").mkdir(parents=True)
    own = tmp_path / "configs" / "itransformer_mha" / "etth2.yaml"  # the user's own copy wins
    own.write_text((ETT.parents[1] / "itransformer_mha" / "etth2.yaml").read_text())
    elsewhere = tmp_path / "grids" / "mine.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(GOOD.replace("ETTh1: {}", "ETTh1: {}\n  ETTh2: {}"))
    paths = {c.dataset: c.config_path for c in load_grid(elsewhere).cells() if not c.is_naive}
    assert paths["ETTh1"] == ETT.parents[1] / "itransformer_mha" / "etth1.yaml"
    inside = tmp_path / "configs" / "leaderboard" / "mine.yaml"
    inside.parent.mkdir()
    inside.write_text(elsewhere.read_text())
    paths = {c.dataset: c.config_path for c in load_grid(inside).cells() if not c.is_naive}
    assert paths["ETTh2"] == own and paths["ETTh1"] == ETT.parents[1] / "itransformer_mha" / "etth1.yaml"


TARGETS = """targets:
  parity:
    title: Parity
    model: itransformer_mha
    published: iTransformer
    tolerance: 0.015
    datasets: [ETTh1]
  goals:
    - title: Goals
      baseline: itransformer_mha
      published: iTransformer
      columns:
        - header: ETT
          against: baseline
          datasets: [ETTh1, etth2]
          at_least: 2
      note: What the verdicts mean.
"""


def test_targets_are_read_into_the_grid_and_feed_no_cell(tmp_path):
    from damcha_ts.leaderboard.targets import GoalColumn, ReportTargets

    plain, with_targets = tmp_path / "plain.yaml", tmp_path / "targets.yaml"
    plain.write_text(GOOD)
    with_targets.write_text(GOOD + TARGETS)
    assert load_grid(plain).targets == ReportTargets()
    targets = load_grid(with_targets).targets
    assert (targets.parity.model, targets.parity.tolerance, targets.parity.datasets) == ("itransformer_mha", 0.015, ("ETTh1",))
    (goal,) = targets.goals
    assert goal.columns == (GoalColumn("ETT", "baseline", ("ETTh1", "ETTh2"), 2),)  # names canonicalised
    assert goal.note == "What the verdicts mean."
    assert load_grid(with_targets).cells() == load_grid(plain).cells()
    # The issue's own targets live in the ETT grid file, not in the library.
    ett = load_grid(ETT).targets
    assert ett.parity.tolerance == 0.015 and [c.at_least for c in ett.goals[0].columns] == [3, None, None]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("  parity:", "  parities:"), r"unknown key 'targets\.parities'; did you mean parity\?"),
        (("    tolerance: 0.015", "    tolerence: 0.015"), r"unknown key 'targets\.parity\.tolerence'; did you mean tolerance\?"),
        (("    tolerance: 0.015", "    tolerance: -1"), r"targets\.parity\.tolerance: expected a positive number, got -1"),
        (("    tolerance: 0.015", "    tolerance: true"), r"targets\.parity\.tolerance: expected a positive number, got True"),
        (("    tolerance: 0.015", "    tolerance: .nan"), r"targets\.parity\.tolerance: expected a positive number, got nan"),
        (("    tolerance: 0.015\n", ""), r"targets\.parity: missing required key 'tolerance'"),
        (("    title: Parity", "    title: ''"), r"targets\.parity\.title: expected a non-empty string"),
        (("    model: itransformer_mha", "    model: itransformer_mah"), r"targets\.parity\.model 'itransformer_mah' is not one of"),
        (("    datasets: [ETTh1]", "    datasets: [ETTh9]"), r"targets\.parity\.datasets: .*ETTh9"),
        (("    published: iTransformer\n    tolerance", "    published: Transformer\n    tolerance"),
         r"targets\.parity\.published: 'Transformer' is not a published model \(iTransformer, "),
        ((TARGETS[TARGETS.index("  goals:"):], "  goals: {title: Goals}\n"),
         r"targets\.goals: expected a list of goal tables, got \{'title': 'Goals'\}"),
        (("      baseline: itransformer_mha", "      baseline: itransformer_damcha"),
         r"targets\.goals\[0\]\.baseline: 'itransformer_damcha' is not one of \['itransformer_mha', 'gateformer_mha'\]"),
        (("      note: What", "      notes: What"), r"unknown key 'targets\.goals\[0\]\.notes'; did you mean note\?"),
        (("        - header: ETT", "        - heading: ETT"),
         r"unknown key 'targets\.goals\[0\]\.columns\[0\]\.heading'; did you mean header\?"),
        (("          against: baseline", "          against: mha"),
         r"targets\.goals\[0\]\.columns\[0\]\.against: 'mha' is not one of \['baseline', 'published'\]"),
        (("          at_least: 2", "          at_least: 3"),
         r"targets\.goals\[0\]\.columns\[0\]\.at_least: expected an integer from 1 to 2 .*got 3"),
        (("          at_least: 2", "          at_least: 0"), r"columns\[0\]\.at_least: expected an integer from 1 to 2"),
        (("          datasets: [ETTh1, etth2]", "          datasets: [ETTh1, etth1]"),
         r"targets\.goals\[0\]\.columns\[0\]\.datasets: .* lists a dataset twice"),
        (("          datasets: [ETTh1, etth2]", "          datasets: []"),
         r"targets\.goals\[0\]\.columns\[0\]\.datasets: expected a non-empty list of dataset names"),
        (("      columns:\n", "      columns: []\n      old_columns:\n"), r"unknown key 'targets\.goals\[0\]\.old_columns'"),
    ],
    ids=["section-typo", "parity-key-typo", "tolerance-negative", "tolerance-bool", "tolerance-nan", "tolerance-absent",
         "title-empty", "parity-model-unknown", "parity-dataset-unknown", "published-unknown", "goals-mapping",
         "baseline-not-mha", "goal-key-typo", "column-key-typo", "against-unknown", "at-least-too-many",
         "at-least-zero", "column-dataset-twice", "column-no-dataset", "goal-extra-key"],
)
def test_a_bad_targets_section_is_refused_with_the_file_and_key_named(tmp_path, change, message):
    from damcha_ts.errors import ConfigError

    old, new = change
    assert old in TARGETS
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD + TARGETS.replace(old, new, 1))
    with pytest.raises(ConfigError, match=rf"bad\.yaml: .*{message}"):
        load_grid(bad)


def test_grids_of_one_report_share_their_targets(tmp_path):
    from damcha_ts.errors import ConfigError
    from damcha_ts.leaderboard.grid import combined_targets
    from damcha_ts.leaderboard.targets import ReportTargets

    one, same, goals, other = (tmp_path / f"{name}.yaml" for name in ("one", "same", "goals", "other"))
    one.write_text(GOOD + TARGETS)
    same.write_text(GOOD.replace("name: mine", "name: same") + TARGETS)
    goals_only = "targets:\n" + TARGETS[TARGETS.index("  goals:"):].replace("title: Goals", "title: More goals")
    goals.write_text(GOOD + goals_only)
    other.write_text(GOOD + TARGETS.replace("tolerance: 0.015", "tolerance: 0.02"))
    combined = combined_targets([load_grid(goals), load_grid(one), load_grid(same)])
    assert combined.parity == load_grid(one).targets.parity  # one parity check, given twice the same
    assert [goal.title for goal in combined.goals] == ["More goals", "Goals"]  # grid order, each once
    assert combined_targets([]) == ReportTargets()
    with pytest.raises(ConfigError, match=r"other\.yaml: targets\.parity differs from the one in .*one\.yaml"):
        combined_targets([load_grid(one), load_grid(other)])
