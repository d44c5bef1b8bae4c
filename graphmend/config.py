"""``graphmend.yml``: reading and validating the configuration (DESIGN.md, "Config").

Every error names the file, the key, what was expected and what was found, in one line.
Action inputs override the file and command-line flags override both; the overriding is done
by the callers with ``Config.replace_section``.
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

CONFIG_NAMES = ("graphmend.yml", ".github/graphmend.yml")
ENTRY_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
TARGET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
DTYPES = ("float32", "float16", "bfloat16", "float64")

# A configuration is a few dozen values: these bounds are far above any real one and keep a
# hostile file (an alias "billion laughs", a 20,000-deep nesting) from costing memory, time or
# a RecursionError. An error message shows a value through ``_SHOW``, which never expands it.
MAX_YAML_BYTES = 1_000_000
MAX_YAML_DEPTH = 64
MAX_YAML_VALUES = 100_000
_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother, _SHOW.maxlist, _SHOW.maxdict = 3, 80, 80, 8, 8


class ConfigError(Exception):
    """A configuration problem; ``str()`` is the one-line message for the user."""

    def __init__(self, file: str, key: str, expected: str, found: Any):
        self.file, self.key, self.expected, self.found = file, key, expected, found
        shown = found if isinstance(found, str) and found.startswith("<") else _SHOW.repr(found)
        super().__init__(f"{file}: {key}: expected {expected}, found {shown}")


@dataclass(frozen=True)
class TargetConfig:
    name: str
    entry: str
    device: str = "auto"
    dtype: str = "float32"
    backend: str = "inductor"
    rtol: Optional[float] = None
    atol: Optional[float] = None
    inputs: Optional[str] = None
    batch_arg: Optional[str] = None
    mode: str = "eval"
    # Dynamo capture settings in force around every call of the compiled target (GM5xx): the
    # harness is the compile site, so this is where a user proves a setting GraphMend proposed.
    dynamo_config: tuple[str, ...] = ()
    # Seconds one worker run of this target may take; None: ``sandbox.timeout_s``. A large model
    # needs longer than a tiny one, and a hung tiny target need not wait out the large one's limit.
    timeout_s: Optional[float] = None


@dataclass(frozen=True)
class SandboxConfig:
    runner: str = "subprocess"
    image: Optional[str] = None
    timeout_s: float = 900
    memory: str = "16g"


@dataclass(frozen=True)
class FixConfig:
    safety: str = "safe"
    select: tuple[str, ...] = ("GM",)
    ignore: tuple[str, ...] = ()
    # The module fixes in a package import the runtime from (relative to the root; a .py file in
    # a package). None: `<top package>/_graphmend_runtime.py` beside each package.
    runtime: Optional[str] = None


@dataclass(frozen=True)
class GateConfig:
    fail_on: str = "new-breaks"
    baseline: str = "graphmend-baseline.json"


@dataclass(frozen=True)
class BenchConfig:
    warmup: int = 3
    repeat: int = 20
    batch_sizes: tuple[int, ...] = (1,)


@dataclass(frozen=True)
class ReviewConfig:
    suggestions: bool = True
    comment: str = "on-change"


@dataclass(frozen=True)
class Config:
    root: Path
    file: Optional[Path] = None
    paths: tuple[str, ...] = (".",)
    exclude: tuple[str, ...] = ()
    targets: tuple[TargetConfig, ...] = ()
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    fix: FixConfig = field(default_factory=FixConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    review: ReviewConfig = field(default_factory=ReviewConfig)

    def target(self, name: str) -> TargetConfig:
        for t in self.targets:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.targets) or "none configured"
        raise ConfigError(self.display_file, "targets", f"a target named {name!r} (known: {known})", "<no such target>")

    def timeout_for(self, target: TargetConfig) -> float:
        """Seconds one worker run of ``target`` may take: its own ``timeout_s``, else the sandbox's."""
        return target.timeout_s if target.timeout_s is not None else self.sandbox.timeout_s

    @property
    def display_file(self) -> str:
        return str(self.file) if self.file else "graphmend.yml (defaults)"

    def replace_section(self, section: str, **changes: Any) -> "Config":
        """A copy with some fields of one section changed (flags and action inputs)."""
        current = getattr(self, section)
        return dataclasses.replace(self, **{section: dataclasses.replace(current, **changes)})

    def is_in_paths(self, rel_path: str) -> bool:
        """Whether a repo-relative file may be rewritten (inside ``paths``, not excluded)."""
        rel = rel_path.replace("\\", "/")
        if rel.startswith("../") or rel.startswith("/"):
            return False
        inside = any(_under(rel, p) for p in self.paths)
        return inside and not any(_glob_match(rel, pat) for pat in self.exclude)


def _under(rel: str, prefix: str) -> bool:
    p = prefix.replace("\\", "/").strip("/")
    if p in ("", "."):
        return True
    return rel == p or rel.startswith(p + "/")


def _glob_match(rel: str, pattern: str) -> bool:
    """gitignore-like matching: ``**`` spans folders, ``*`` stays inside one."""
    regex = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            regex += ".*"
            i += 2
        elif pattern[i] == "*":
            regex += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            regex += "[^/]"
            i += 1
        else:
            regex += re.escape(pattern[i])
            i += 1
    return re.fullmatch(regex, rel) is not None or re.fullmatch(regex + "/.*", rel) is not None


# --------------------------------------------------------------------------------------------
# Loading


def find_config(root: Path) -> Optional[Path]:
    for name in CONFIG_NAMES:
        candidate = root / name
        if candidate.is_file():
            return candidate
    return None


def load_config(root: Path | str = ".", path: Path | str | None = None) -> Config:
    """Read and validate the configuration of the repository at ``root``.

    With no ``path`` and no file at the usual places, the defaults apply (static checks of
    the whole tree, no targets). An explicit ``path`` that is missing is an error.
    """
    root = Path(root).resolve()
    if path is not None:
        file = Path(path)
        if not file.is_absolute():
            file = (Path.cwd() / file).resolve()
        if not file.is_file():
            raise ConfigError(str(path), "(file)", "a readable YAML file", "<missing>")
    else:
        file = find_config(root)
        if file is None:
            return Config(root=root)
    shown = _display(file, root)
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(shown, "(file)", "UTF-8 text", "<undecodable bytes>") from None
    except OSError as exc:
        raise ConfigError(shown, "(file)", "a readable file", f"<{exc.strerror}>") from None
    data = load_yaml(text, shown)
    if data is None:
        data = {}
    return parse_config(data, root=root, file=file, shown=shown)


def load_yaml(text: str, shown: str) -> Any:
    """``yaml.safe_load`` of a configuration file, bounded in size, nesting depth and the number
    of values its aliases expand to; every failure is a one-line ``ConfigError``."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(shown, "(file)", f"at most {MAX_YAML_BYTES} characters", f"<{len(text)} characters>")
    try:
        # The event stream is produced without recursion: the depth is checked before the
        # composer (which recurses) sees the document.
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else 0
                    raise ConfigError(shown, "(file)", f"at most {MAX_YAML_DEPTH} levels of nesting",
                                      f"<deeper at line {line}>")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None and _expanded_size(node, {}) > MAX_YAML_VALUES:
            raise ConfigError(shown, "(file)", f"at most {MAX_YAML_VALUES} values once aliases are expanded",
                              "<more (an alias bomb?)>")
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(shown, "(file)", "valid YAML", f"<{str(problem)[:200]}{where}>") from None
    return {} if data is None else data


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many values ``node`` stands for with every alias expanded (memoised by node, so a
    graph of shared nodes is measured without being expanded). Depth is bounded already."""
    known = memo.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    memo[id(node)] = min(size, MAX_YAML_VALUES + 1)
    return memo[id(node)]


def _display(file: Path, root: Path) -> str:
    try:
        return str(file.relative_to(root))
    except ValueError:
        return str(file)


def _dynamo_settings(r: "_Reader") -> tuple[str, ...]:
    from graphmend.rules import CONFIG_RULES

    settings = r.str_list("dynamo_config", ())
    for setting in settings:
        if setting not in CONFIG_RULES:
            raise r.error("dynamo_config", "a list of Dynamo capture settings (" + ", ".join(CONFIG_RULES) + ")")
    return settings


class _Reader:
    """Typed access to one mapping of the YAML file, naming the key on every error."""

    def __init__(self, shown: str, prefix: str, data: Any, known: tuple[str, ...]):
        self.shown, self.prefix = shown, prefix
        if not isinstance(data, dict):
            raise ConfigError(shown, prefix or "(top level)", "a mapping", _kind(data))
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ConfigError(shown, self.key(unknown[0]), f"one of the known keys ({', '.join(known)})", "<unknown key>")
        self.data = data

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def error(self, name: str, expected: str) -> ConfigError:
        return ConfigError(self.shown, self.key(name), expected, self.data.get(name))

    def str_(self, name: str, default: Optional[str], *, choices: tuple[str, ...] = (), nullable: bool = False) -> Optional[str]:
        if name not in self.data:
            return default
        value = self.data[name]
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not value:
            raise self.error(name, "a string" + (" or null" if nullable else ""))
        if choices and value not in choices:
            raise self.error(name, "one of " + " | ".join(choices))
        return value

    def number(self, name: str, default: Optional[float], *, nullable: bool = False, minimum: float = 0) -> Optional[float]:
        if name not in self.data:
            return default
        value = self.data[name]
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise self.error(name, f"a number >= {minimum}" + (" or null" if nullable else ""))
        return value

    def integer(self, name: str, default: int, *, minimum: int = 0) -> int:
        if name not in self.data:
            return default
        value = self.data[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(name, f"an integer >= {minimum}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        if name not in self.data:
            return default
        value = self.data[name]
        if not isinstance(value, bool):
            raise self.error(name, "true or false")
        return value

    def str_list(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        if name not in self.data:
            return default
        value = self.data[name]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(name, "a list of strings")
        return tuple(value)


def _kind(value: Any) -> str:
    return f"<{type(value).__name__}: {_SHOW.repr(value)}>" if value is not None else "<null>"


def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def parse_config(data: Any, *, root: Path, file: Optional[Path] = None, shown: str = "graphmend.yml") -> Config:
    top = _Reader(shown, "", data, ("paths", "exclude", "targets", "sandbox", "fix", "gate", "bench", "review"))
    paths = top.str_list("paths", (".",))
    exclude = top.str_list("exclude", ())

    raw_targets = data.get("targets") or []
    if not isinstance(raw_targets, list):
        raise top.error("targets", "a list of targets")
    targets: list[TargetConfig] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_targets):
        r = _Reader(shown, f"targets[{i}]", raw, _fields(TargetConfig))
        name = r.str_("name", None)
        if name is None or not TARGET_NAME_RE.match(name):
            raise r.error("name", "a name of letters, digits, '.', '_' or '-'")
        if name in seen:
            raise r.error("name", "a name not used by another target")
        seen.add(name)
        entry = r.str_("entry", None)
        if entry is None or not ENTRY_RE.match(entry):
            raise r.error("entry", 'an entry point "package.module:factory"')
        inputs = r.str_("inputs", None, nullable=True)
        if inputs is not None and not ENTRY_RE.match(inputs):
            raise r.error("inputs", 'null or "package.module:function"')
        targets.append(
            TargetConfig(
                name=name,
                entry=entry,
                device=r.str_("device", "auto", choices=("auto", "cpu", "cuda")),
                dtype=r.str_("dtype", "float32", choices=DTYPES),
                backend=r.str_("backend", "inductor"),
                rtol=r.number("rtol", None, nullable=True),
                atol=r.number("atol", None, nullable=True),
                inputs=inputs,
                batch_arg=r.str_("batch_arg", None, nullable=True),
                mode=r.str_("mode", "eval", choices=("eval", "train")),
                dynamo_config=_dynamo_settings(r),
                timeout_s=r.number("timeout_s", None, nullable=True, minimum=1),
            )
        )

    sb = _Reader(shown, "sandbox", data.get("sandbox") or {}, _fields(SandboxConfig))
    sandbox = SandboxConfig(
        runner=sb.str_("runner", "subprocess", choices=("subprocess", "docker")),
        image=sb.str_("image", None, nullable=True),
        timeout_s=sb.number("timeout_s", 900, minimum=1),
        memory=sb.str_("memory", "16g"),
    )
    if not re.fullmatch(r"\d+[kmg]?", sandbox.memory, re.I):
        raise sb.error("memory", 'a size such as "16g" or "512m"')
    if sandbox.runner == "docker" and not sandbox.image:
        raise ConfigError(shown, "sandbox.image", "an image name when sandbox.runner is docker", None)

    fx = _Reader(shown, "fix", data.get("fix") or {}, _fields(FixConfig))
    fix = FixConfig(
        safety=fx.str_("safety", "safe", choices=("safe", "unsafe")),
        select=fx.str_list("select", ("GM",)),
        ignore=fx.str_list("ignore", ()),
        runtime=fx.str_("runtime", None, nullable=True),
    )
    if fix.runtime is not None and not re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*/)*[A-Za-z_][A-Za-z0-9_]*\.py", fix.runtime):
        raise fx.error("runtime", 'a module path relative to the root, such as "src/pkg/_graphmend_runtime.py"')
    for key, codes in (("select", fix.select), ("ignore", fix.ignore)):
        for code in codes:
            if not re.fullmatch(r"GM\d{0,3}", code):
                raise ConfigError(shown, f"fix.{key}", 'rule-code prefixes such as "GM" or "GM1"', code)

    gt = _Reader(shown, "gate", data.get("gate") or {}, _fields(GateConfig))
    gate = GateConfig(
        fail_on=gt.str_("fail_on", "new-breaks", choices=("new-breaks", "any-break", "never")),
        baseline=gt.str_("baseline", "graphmend-baseline.json"),
    )

    bn = _Reader(shown, "bench", data.get("bench") or {}, _fields(BenchConfig))
    batch_sizes = bn.data.get("batch_sizes", [1])
    if not isinstance(batch_sizes, list) or not batch_sizes or not all(
        isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in batch_sizes
    ):
        raise bn.error("batch_sizes", "a non-empty list of positive integers")
    bench = BenchConfig(
        warmup=bn.integer("warmup", 3),
        repeat=bn.integer("repeat", 20, minimum=1),
        batch_sizes=tuple(batch_sizes),
    )

    rv = _Reader(shown, "review", data.get("review") or {}, _fields(ReviewConfig))
    review = ReviewConfig(
        suggestions=rv.boolean("suggestions", True),
        comment=rv.str_("comment", "on-change", choices=("on-change", "always", "never")),
    )
    return Config(
        root=root,
        file=file,
        paths=paths,
        exclude=exclude,
        targets=tuple(targets),
        sandbox=sandbox,
        fix=fix,
        gate=gate,
        bench=bench,
        review=review,
    )
