"""graphmend.yml: defaults, every section, and errors that name the file, the key, expected and found."""

from pathlib import Path

import pytest

from graphmend.config import ConfigError, load_config

FULL = """
paths: [src/]
exclude: ["**/tests/**"]
targets:
  - name: tiny-bart
    entry: tools.graphmend_targets:tiny_bart
    device: cpu
    dtype: float16
    backend: aot_eager
    rtol: 0.001
    atol: null
    inputs: tools.graphmend_targets:bart_inputs
    batch_arg: batch
    mode: train
    timeout_s: 30
  - {name: big, entry: "tools.graphmend_targets:big"}
sandbox: {runner: docker, image: my/image:1, timeout_s: 60, memory: 2g}
fix: {safety: unsafe, select: [GM1, GM3], ignore: [GM301]}
gate: {fail_on: any-break, baseline: base.json}
bench: {warmup: 1, repeat: 5, batch_sizes: [1, 8]}
review: {suggestions: false, comment: always}
"""


def write(tmp_path: Path, text: str, name: str = "graphmend.yml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_without_a_file(tmp_path):
    config = load_config(tmp_path)
    assert config.file is None
    assert config.paths == (".",) and config.targets == ()
    assert config.fix.safety == "safe" and config.gate.fail_on == "new-breaks"


def test_every_section_is_read(tmp_path):
    write(tmp_path, FULL)
    config = load_config(tmp_path)
    target = config.target("tiny-bart")
    assert (target.dtype, target.device, target.backend, target.rtol, target.atol) == ("float16", "cpu", "aot_eager", 0.001, None)
    assert target.inputs == "tools.graphmend_targets:bart_inputs" and target.batch_arg == "batch" and target.mode == "train"
    assert config.sandbox.image == "my/image:1" and config.sandbox.timeout_s == 60
    # a target's own time limit, else the sandbox's
    assert config.timeout_for(target) == 30 and config.timeout_for(config.target("big")) == 60
    assert config.fix.select == ("GM1", "GM3") and config.fix.ignore == ("GM301",)
    assert config.bench.batch_sizes == (1, 8) and config.review.comment == "always"


def test_github_folder_location_is_accepted(tmp_path):
    write(tmp_path, "paths: [lib/]\n", ".github/graphmend.yml")
    assert load_config(tmp_path).paths == ("lib/",)


@pytest.mark.parametrize(
    "text, key, expected, found",
    [
        ("pathz: [src]\n", "pathz", "one of the known keys", "<unknown key>"),
        ("targets:\n  - name: a\n    entry: nocolon\n", "targets[0].entry", "package.module:factory", "'nocolon'"),
        ("targets:\n  - name: a\n    entry: m:f\n    dtype: float8\n", "targets[0].dtype", "float32 | float16", "'float8'"),
        ("targets:\n  - name: a\n    entry: m:f\n    colour: red\n", "targets[0].colour", "known keys", "<unknown key>"),
        ("targets:\n  - {name: a, entry: 'm:f'}\n  - {name: a, entry: 'm:g'}\n", "targets[1].name", "not used by another", "'a'"),
        ("fix: {safety: maybe}\n", "fix.safety", "safe | unsafe", "'maybe'"),
        ("fix: {select: [XY1]}\n", "fix.select", "rule-code prefixes", "XY1"),
        ("bench: {batch_sizes: [0]}\n", "bench.batch_sizes", "positive integers", "[0]"),
        ("bench: {repeat: two}\n", "bench.repeat", "an integer", "'two'"),
        ("sandbox: {runner: docker}\n", "sandbox.image", "an image name", "None"),
        ("sandbox: {memory: lots}\n", "sandbox.memory", "a size", "'lots'"),
        ("targets:\n  - {name: a, entry: 'm:f', timeout_s: 0}\n", "targets[0].timeout_s", "a number >= 1 or null", "0"),
        ("review: {suggestions: yes please}\n", "review.suggestions", "true or false", "'yes please'"),
        ("targets: {name: a}\n", "targets", "a list of targets", "{'name': 'a'}"),
        ("- just\n- a list\n", "(top level)", "a mapping", "<list"),
        ("paths: [src\n", "(file)", "valid YAML", "<"),
    ],
)
def test_errors_name_file_key_expected_and_found(tmp_path, text, key, expected, found):
    write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    message = str(info.value)
    assert message.startswith("graphmend.yml: " + key + ": expected "), message
    assert expected in message and found in message
    assert "\n" not in message


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="nope.yml: \\(file\\): expected a readable YAML file, found <missing>"):
        load_config(tmp_path, tmp_path / "nope.yml")


def test_non_utf8_config_is_an_error(tmp_path):
    (tmp_path / "graphmend.yml").write_bytes(b"paths: [\xff\xfe]\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_config(tmp_path)


def test_unknown_target_name_lists_the_known_ones(tmp_path):
    write(tmp_path, FULL)
    with pytest.raises(ConfigError, match="known: tiny-bart"):
        load_config(tmp_path).target("tiny-t5")


@pytest.mark.parametrize(
    "rel, inside",
    [
        ("src/pkg/a.py", True),
        ("src/pkg/tests/test_a.py", False),
        ("tools/targets.py", False),
        ("../elsewhere/src/a.py", False),
        ("srcx/a.py", False),
    ],
)
def test_paths_and_exclude(tmp_path, rel, inside):
    write(tmp_path, FULL)
    assert load_config(tmp_path).is_in_paths(rel) is inside


def _alias_bomb(levels: int) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\npaths: *l{levels}\n"


def test_a_yaml_alias_bomb_is_one_short_error(tmp_path):
    import time

    (tmp_path / "graphmend.yml").write_text(_alias_bomb(6))
    started = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    message = str(err.value)
    assert len(message) < 300 and "\n" not in message
    assert "aliases" in message and "graphmend.yml" in message
    assert time.monotonic() - started < 5


def test_a_20000_deep_yaml_is_one_error_not_a_recursion_error(tmp_path):
    (tmp_path / "graphmend.yml").write_text("paths: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    assert "levels of nesting" in str(err.value)


def test_a_wrong_value_is_shown_without_being_expanded(tmp_path):
    (tmp_path / "graphmend.yml").write_text("paths: [" + ", ".join(["[1, 2, 3]"] * 5000) + "]\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    assert len(str(err.value)) < 400
