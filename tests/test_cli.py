"""The command line itself: --version, help, usage errors, init; and that non-engine verbs stay torch-free."""

import subprocess
import sys

import yaml

from graphmend.config import load_config


def graphmend(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "graphmend", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_version_names_graphmend_and_torch():
    out = graphmend("--version")
    assert out.returncode == 0
    assert out.stdout.startswith("graphmend 0.") and "(torch 2.13.0" in out.stdout


def test_help_lists_every_verb_without_importing_torch():
    code = "import sys; from graphmend.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit: pass\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().endswith("False"), out.stdout
    for verb in ("check", "fix", "verify", "bench", "pr", "post", "scan", "baseline", "init", "demo", "rules", "explain"):
        assert verb in out.stdout


def test_no_verb_is_a_usage_error():
    out = graphmend()
    assert out.returncode == 2


def test_unknown_verb_is_a_usage_error():
    out = graphmend("frobnicate")
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_init_writes_a_config_that_loads_and_refuses_to_overwrite(tmp_path):
    out = graphmend("init", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    config = load_config(tmp_path)
    assert [t.entry for t in config.targets] == ["tools.graphmend_targets:my_model"]
    assert "# What may be rewritten" in (tmp_path / "graphmend.yml").read_text()
    assert (tmp_path / "tools" / "__init__.py").exists()
    compile((tmp_path / "tools" / "graphmend_targets.py").read_text(), "targets", "exec")
    again = graphmend("init", cwd=tmp_path)
    assert again.returncode == 2 and "use --force" in again.stderr
    assert graphmend("init", "--force", "--src", "lib/", cwd=tmp_path).returncode == 0
    assert yaml.safe_load((tmp_path / "graphmend.yml").read_text())["paths"] == ["lib/"]
