"""trtdiff.options.config: [tool.trtdiff] found upward, keys read by the options' own readers, unknown and
code-running keys refused naming the key and the file; the command line over the file, sources in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trtdiff.cli.app import main
from trtdiff.errors import ConfigError
from trtdiff.options import CompareOptions, every_option
from trtdiff.options.config import find_pyproject, load_config
from trtdiff.options.resolved import resolve
from trtdiff.report import Report

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"


def _pyproject(folder: Path, table: str, name: str = "pyproject.toml") -> Path:
    path = folder / name
    path.write_text(f'[project]\nname = "x"\n\n[tool.trtdiff]\n{table}\n')
    return path


def test_the_nearest_pyproject_with_the_table_is_found_upward_and_not_past_a_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    deep = repo / "src" / "pkg"
    deep.mkdir(parents=True)
    (repo / ".git").mkdir()
    found = _pyproject(repo, "opset = 10")
    (repo / "src" / "pyproject.toml").write_text('[project]\nname = "inner"\n')  # no table: passed over
    assert find_pyproject(deep) == found.resolve()
    _pyproject(tmp_path, "opset = 13")  # above the repository root: never read
    (found).unlink()
    assert find_pyproject(deep) is None


def test_typed_values_and_text_are_read_like_the_command_line(tmp_path: Path) -> None:
    path = _pyproject(
        tmp_path,
        'opset = 10\ninput_shapes = ["1x3x64x64"]\nmin_cosine = 0.999\nmemory_bytes = "64MB"\n'
        'backends = "torch,onnxruntime"\nmean = [0.485, 0.456, 0.406]\nper_layer = true\nrtol = "1e-2"',
    )
    config = load_config(start=tmp_path)
    assert config is not None and config.path == path.resolve()
    assert config.values == {
        "opset": 10,
        "input_shapes": ("1x3x64x64",),
        "min_cosine": 0.999,
        "memory_bytes": 64 * 1024**2,
        "backends": ("torch", "onnxruntime"),
        "mean": (0.485, 0.456, 0.406),
        "per_layer": True,
        "rtol": 0.01,
    }
    options = CompareOptions().with_fields(**config.compare_fields)
    options.validate()
    assert options.export.opset == 10 and options.thresholds.min_cosine == 0.999


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("min_cosin = 0.9", "unknown key 'min_cosin'; did you mean 'min_cosine'?"),
        ("colour = true", "unknown key 'colour'"),
        ("opset = [10]", "opset = [10]: expected one value, not a list"),
        ("opset = 7.5", "opset = 7.5:"),
        ("per_layer = 3", "per_layer = 3: expected true or false"),
        ("precision = 'fp8'", "precision = 'fp8': unknown; choose one of fp32, fp16, bf16"),
        ("opset = 10\nopsets = [10, 13]", "opset and opsets both set"),
        ("config = 'other.toml'", "unknown key 'config'"),
    ],
)
def test_a_bad_key_names_the_key_and_the_file(tmp_path: Path, table: str, expected: str) -> None:
    path = _pyproject(tmp_path, table)
    with pytest.raises(ConfigError) as error:
        load_config(start=tmp_path)
    assert str(error.value).startswith(f"{path.resolve()} [tool.trtdiff]: ") and expected in str(error.value)


@pytest.mark.parametrize("key", ["trust = true", "model_class = 'evil.mod:Net'"])
def test_options_that_run_code_are_taken_from_the_command_line_only(tmp_path: Path, key: str) -> None:
    _pyproject(tmp_path, key)
    with pytest.raises(ConfigError, match="run code from a file or module, so it is taken from the command line only"):
        load_config(start=tmp_path)


WRITES = ["json", "junit", "markdown", "html", "model_explorer", "save_onnx", "save_engine", "engine_cache", "save_repro",
          "save", "force", "exclude_list"]  # fmt: skip


def test_every_option_that_names_a_path_trtdiff_writes_is_declared_so() -> None:
    """An output path added later is refused in config files too: every PATH/DIR option is an input or `writes`."""
    reads = {"onnx", "input_files", "inputs_dir", "labels_dir", "config", "recordings"}
    for declared in every_option():
        metavar = declared.option.metavar or ""
        if metavar.endswith(("PATH", "DIR", "FILE")) and declared.name not in reads:
            assert declared.option.writes, f"{declared.name} names a path: declare writes=True, or list it as read"
    assert sorted(d.name for d in every_option() if d.option.writes) == sorted(WRITES)


@pytest.mark.parametrize("key", WRITES)
def test_options_that_write_files_are_taken_from_the_command_line_only(tmp_path: Path, key: str) -> None:
    value = "true" if key == "force" else "'../victim'"
    path = _pyproject(tmp_path, f"{key} = {value}")
    with pytest.raises(ConfigError) as error:
        load_config(start=tmp_path)
    what = "lets trtdiff overwrite files" if key == "force" else "names a file or folder trtdiff writes"
    assert str(error.value).startswith(
        f"{path.resolve()} [tool.trtdiff]: {key} {what}, so it is taken from the command"
    )


@pytest.mark.parametrize(
    ("key", "command"), [("host", "view"), ("port", "view"), ("no_browser", "view"), ("example", "demo")]
)
def test_options_of_commands_that_read_no_config_file_are_refused(tmp_path: Path, key: str, command: str) -> None:
    value = {"host": "'0.0.0.0'", "port": "80", "example": "'resnet'"}.get(key, "true")
    _pyproject(tmp_path, f"{key} = {value}")
    with pytest.raises(ConfigError, match=f"{key} is an option of trtdiff {command}, which reads no config file"):
        load_config(start=tmp_path)


def test_a_cloned_repositorys_pyproject_cannot_overwrite_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = tmp_path / "victim.md"
    victim.write_text("precious\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".git").mkdir()
    path = _pyproject(repo, f'markdown = "{victim}"\nforce = true\nsave_onnx = "{victim}"')
    monkeypatch.chdir(repo)
    code, stdout, stderr = _run("compare", FACTORY, "--input-shape", "1x3x32x32")
    assert code == 2 and stdout == "" and victim.read_text() == "precious\n"
    assert stderr.strip().splitlines() == [
        f"Error: {path.resolve()} [tool.trtdiff]: markdown names a file or folder trtdiff writes, so it is taken "
        "from the command line only (--markdown); remove it from the file"
    ]


def test_config_file_names_a_pyproject_or_a_file_of_options(tmp_path: Path) -> None:
    plain = tmp_path / "trtdiff.toml"
    plain.write_text("opset = 13\nseed = 4\nquiet = true\n")
    config = load_config(plain)
    assert config is not None and config.values == {"opset": 13, "seed": 4, "quiet": True}
    assert config.compare_fields == {"opset": 13, "seed": 4}  # quiet is the command line's own
    bare = tmp_path / "pyproject.toml"
    bare.write_text('[project]\nname = "x"\n')
    with pytest.raises(ConfigError, match=r"no \[tool.trtdiff\] table"):
        load_config(bare)
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("opset = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(broken)


def test_resolved_options_name_their_sources() -> None:
    options = CompareOptions().with_fields(opset=10, min_cosine=0.99, seed=3)
    resolved = resolve(options, {"opset": "/repo/pyproject.toml", "min_cosine": "command line"})
    assert resolved["opset"].value == 10 and resolved["opset"].source == "/repo/pyproject.toml"
    assert resolved["min_cosine"].source == "command line"
    assert resolved["seed"].source == "caller" and resolved["rtol"].source == "default"
    assert resolved["input_shapes"].value == []  # as JSON holds it


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_an_unknown_key_exits_2_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _pyproject(tmp_path, "opsett = 10")
    monkeypatch.chdir(tmp_path)
    code, _, stderr = _run("compare", FACTORY)
    assert code == 2 and stderr.strip().splitlines() == [
        f"Error: {path.resolve()} [tool.trtdiff]: unknown key 'opsett'; did you mean 'opset'? (docs/options.md)"
    ]
    code, _, stderr = _run("compare", FACTORY, "--no-config", "--config", str(path))
    assert code == 2 and "--no-config" in stderr


@pytest.mark.parametrize(("table", "flags"), [("rtol = nan", ()), ("max_abs = nan", ()), ("", ("--rtol", "nan"))])
def test_a_nan_threshold_is_refused_from_the_file_and_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, flags: tuple[str, ...]
) -> None:
    """NaN compares false with everything: taken as a limit it would pass a failing model (issue 36, item 7)."""
    _pyproject(tmp_path, table)
    monkeypatch.chdir(tmp_path)
    code, _, stderr = _run("compare", FACTORY, "--opset", "10", "--input-shape", "1x3x32x32", *flags)
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert "nan: must be a finite number, 0 or more" in stderr


@pytest.mark.slow
def test_pyproject_sets_the_opset_and_the_report_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _pyproject(tmp_path, 'opset = 10\ninput_shapes = ["1x3x64x64"]\nmin_cosine = 0.99')
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = _run("compare", FACTORY, "--json", "r.json", "--min-cosine", "0.9999", "--no-culprit")
    assert code == 1
    report = Report.from_json((tmp_path / "r.json").read_text())
    assert report.opset == 10 and report.inputs == {"x": (1, 3, 64, 64)}
    assert report.options["opset"].value == 10 and report.options["opset"].source == str(path.resolve())
    assert report.options["min_cosine"].value == 0.9999 and report.options["min_cosine"].source == "command line"
    assert report.options["culprit"].source == "command line" and report.options["rtol"].source == "default"
    assert f"options from {path.resolve()}: input_shapes, opset" in stdout.replace("\n", "")
    code, stdout, _ = _run(
        "compare",
        FACTORY,
        "--config",
        str(_pyproject(tmp_path, 'opsets = [13]\nshow_all = true\ninput_shapes = ["1x3x64x64"]', "all.toml")),
        "--no-culprit",
    )
    listed = stdout.replace("\n", "")  # every key the file set, the command line's own (show_all) and opsets too
    assert (
        code == 0 and "options from" in listed and all(key in listed for key in ("opset", "show_all", "input_shapes"))
    )
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["schema_version"] == 3 and data["options"]["opset"] == {"value": 10, "source": str(path.resolve())}
    code, _, _ = _run("compare", FACTORY, "--opset", "13", "--json", "r13.json", "--no-culprit")
    again = Report.from_json((tmp_path / "r13.json").read_text())
    assert code == 0 and again.opset == 13 and again.options["opset"].source == "command line"


def test_a_config_file_sets_the_precision(tmp_path: Path) -> None:
    """`precision = "bf16"` is read as --precision bf16 is (the command line's --fp16 alias is no key)."""
    _pyproject(tmp_path, 'precision = "bf16"')
    config = load_config(start=tmp_path)
    assert config is not None and config.values == {"precision": "bf16"}
    assert CompareOptions().with_fields(**config.values).runtime.precision == "bf16"
