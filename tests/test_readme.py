"""The README's two commands, verbatim, in a fresh clone: set up + demo, set up + tests.

This is the front door: a new user copies these lines. The test command is run with a narrow
selection appended (the full suite would run this test again); everything before it is the
README's text, unchanged.
"""

import os
import re
import subprocess

import pytest

from tests.conftest import REPO, git


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(commands) == 2, commands
    return commands


def test_readme_opens_with_setup_and_demo_then_setup_and_tests():
    demo, tests = readme_commands()
    assert "python3 -m venv" in demo and demo.rstrip().endswith("graphmend demo")
    assert "python3 -m venv" in tests and "pytest" in tests
    ci = (REPO / ".ci" / "run").read_text()
    assert tests in ci, ".ci/run must call the README's test command"


def vec_isa_env() -> dict[str, str]:
    """``TORCHINDUCTOR_VEC_ISA_OK=1`` where it changes nothing: every vector ISA this CPU lists
    builds and loads here. Inductor otherwise proves that in each process that compiles, with a
    g++ build per ISA (~7 s of CPU), and the demo's benchmark compiles from an empty cache in ten
    fresh processes; proved once here, the ISA each of them picks is the same."""
    from torch._inductor import config, cpu_vec_isa

    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    built = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]  # the ISAs that build and load
    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    with config.patch({"cpp.vec_isa_ok": True}):
        listed = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]  # the ISAs /proc/cpuinfo lists
    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    return {"TORCHINDUCTOR_VEC_ISA_OK": "1"} if built == listed else {}


@pytest.mark.slow
def test_readme_commands_work_in_a_fresh_clone(tmp_path):
    demo, tests = readme_commands()
    clone = tmp_path / "clone"
    # The committed state, as a user would get it (uncommitted work is not part of a clone).
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    before = git(clone, "status", "--porcelain")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "PYTEST_"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    env.update(vec_isa_env())

    out = subprocess.run(["bash", "-c", demo], cwd=clone, env=env, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    artifacts = clone / "graphmend-demo"
    for name in ("check.json", "check.sarif", "fix.diff", "verify.json", "verify.md", "bench.json", "chart.png"):
        assert (artifacts / name).is_file(), name
    assert "torch.where" in (artifacts / "fix.diff").read_text()
    # the story: a target benchmarked with inductor, and the overall line with the verify verdict
    assert "(inductor: it lost the most graphs)" in out.stdout
    assert re.search(r"^overall: breaks \d+ -> \d+; graphs \d+ -> \d+; every target (the fixes reach )?equivalent", out.stdout, re.M)
    # The bundled examples are never rewritten by the demo.
    assert git(clone, "status", "--porcelain", "--", "examples") == ""
    assert before == ""

    selection = " tests/test_model.py tests/test_config.py"
    out = subprocess.run(["bash", "-c", tests + selection], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"\d+ passed", out.stdout)
