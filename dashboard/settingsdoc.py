"""docs/settings.md, generated from the code: every environment variable raywatch reads,
its default as the code has it, its kind, who reads it and what it does.

    python -m dashboard.settingsdoc           # writes docs/settings.md (make settings-doc)
    python -m dashboard.settingsdoc --check   # exits 1 with a diff when it is stale

Nothing is imported or run: the sources are parsed (ast, tokenize), so this needs no
Django, no environment and no database. What it reads:

- dashboard/settings.py: every call of an env_* helper (dashboard/envconf.py). A
  `# --- title (docs/page.md) ---` comment opens a section of the page.
- collectors/agent/config.py: the node agent's own reads (env.get, _number, _whole); its
  `# --- … ---` comment names the agent's section.
- any other module under dashboard/, collectors/ or demo/ that reads a RAYWATCH_*, RAY_*,
  DATABASE_URL or REDIS_URL variable itself (os.environ.get, env.get, os.environ[…]).

A variable's description is the comment block right above the line that names it (or
above its statement, when that names only it), plus a trailing comment on that line. A
comment line `default: …` says how the docs show a default the code computes (from
another setting, the home directory); it is refused where the code's default is a plain
value, which the docs show as it is. A variable read outside those two files whose
module has no comment for it takes its description from ELSEWHERE below.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = "docs/settings.md"
SETTINGS = "dashboard/settings.py"
AGENT_CONFIG = "collectors/agent/config.py"
ENVCONF = "dashboard/envconf.py"
SCANNED = ("dashboard", "collectors", "demo")

SERVER, AGENT, DEMO = "server", "node agent", "make demo"
# A name read straight from the environment that is one of raywatch's settings.
ENV_NAME = re.compile(r"(?:RAYWATCH|RAY)_[A-Z0-9_]+|DATABASE_URL|REDIS_URL")
ANY_NAME = re.compile(r"[A-Z][A-Z0-9_]*")  # another's, read when one of those is unset

# dashboard/envconf.py's helpers: the kind of value each reads, and the index of its
# default argument (None: it has none; its setting is unset by default).
HELPERS: dict[str, tuple[str, int | None]] = {
    "env_str": ("text", 1),
    "env_bool": ("boolean", 1),
    "env_choice": ("choice", 2),
    "env_number": ("number", 1),
    "env_int": ("whole number", 1),
    "env_list": ("list", 1),
    "env_networks": ("networks", 1),
    "env_secret": ("secret", None),
    "env_url": ("URL", None),
    "env_url_with_password": ("URL", None),
}
# collectors/agent/config.py's: _number(env, NAME, default, minimum, maximum=…), and
# _flag(env, NAME, default).
AGENT_HELPERS = {"_number": "number", "_whole": "whole number"}
AGENT_FLAG = "_flag"
# A read wrapped in one of these reads that kind of value (the agent's own checks).
WRAPPERS = {"Path": "path", "_url": "URL", "log_dirs": "list"}

# Variables read outside dashboard/settings.py and collectors/agent/config.py, by modules
# with no comment on the read: their section and description. A comment above the read
# in its own module wins; an entry for a variable nothing reads there is an error.
GPUS, RAY = "GPUs: NVML agents", "Ray"  # settings.py's sections, by title
AGENT_OWN = "node agent: its own settings"  # collectors/agent/config.py's
ELSEWHERE: dict[str, tuple[str, str]] = {
    "RAYWATCH_SIM_GPUS": (GPUS, (
        "The simulated GPU source (`RAYWATCH_GPU_SOURCE=simulated`): how many GPUs it "
        "invents, 0 to 64 (collectors/simnvml.py).")),
    "RAYWATCH_SIM_GCS": (GPUS, (
        "The simulated source: the GCS (HOST:PORT) of the Ray cluster on this host whose "
        "workers hold its GPUs (`make demo` sets it); unset: their load follows waves of "
        "the clock.")),
    "RAYWATCH_KUBERAY_NAME": (AGENT_OWN, (
        "An agent on a Ray head node announces its cluster under this KubeRay name "
        "(collectors/agent/headinfo.py); KubeRay sets `RAY_CLUSTER_NAME` in Ray's "
        "containers, a sidecar may need this.")),
    "RAYWATCH_KUBERAY_NAMESPACE": (AGENT_OWN, (
        "The KubeRay namespace the head's agent announces, e.g. from the downward API; "
        "the cluster is then named `NAMESPACE.NAME`.")),
    "RAY_CLUSTER_TOKEN": (RAY, (
        "Ray's auth token for a cluster `manage.py cluster add NAME URL` adds without "
        "`--token-file`.")),
    "RAYWATCH_DEMO_DIR": ("`make demo`", (
        "`make demo`'s data (its own `RAYWATCH_DATA_DIR`), emptied at each start "
        "(demo/__main__.py).")),
}

OWN = (SETTINGS, AGENT_CONFIG)  # the two settings modules


class SettingsDocError(Exception):
    """The code holds something this generator cannot document faithfully."""


class Unknown(Exception):
    """Not a plain value: computed at start."""


# --- sources --------------------------------------------------------------------------------
@dataclass
class Source:
    """One module: its tree, its comments, and the plain values its top level assigns."""

    path: str
    text: str
    tree: ast.Module
    comments: dict[int, str]  # line -> the comment's text, without "#"
    comment_only: set[int]  # lines that hold nothing but a comment
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> Source:
        text = (ROOT / path).read_text()
        comments, only = {}, set()
        lines = text.splitlines()
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                row, col = tok.start
                comments[row] = tok.string[1:].strip()
                if not lines[row - 1][:col].strip():
                    only.add(row)
        tree = ast.parse(text, path)
        source = cls(path, text, tree, comments, only)
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                source.parents[child] = node
        return source

    def segment(self, node: ast.AST) -> str:
        return " ".join((ast.get_source_segment(self.text, node) or "").split())

    def statement(self, node: ast.AST) -> ast.stmt:
        while not isinstance(node, ast.stmt):
            node = self.parents[node]
        return node

    def block_above(self, line: int) -> list[str]:
        texts = []
        line -= 1
        while line in self.comment_only and not section_title(self.comments[line]):
            texts.append(self.comments[line])
            line -= 1
        return texts[::-1]

    def trailing(self, line: int) -> list[str]:
        if line in self.comments and line not in self.comment_only:
            return [self.comments[line]]
        return []

    def sections(self) -> list[Section]:
        """Each `# --- title (docs/page.md) ---` comment, with the comment block below it
        when a blank line ends that block (the section's introduction)."""
        found = []
        lines = self.text.splitlines()
        for line in sorted(self.comment_only):
            title = section_title(self.comments[line])
            if title:
                pages = re.findall(r"docs/[\w./-]+\.md", title)
                title = re.sub(r"\s*\([^()]*docs/[^()]*\)\s*$", "", title)
                intro, end = [], line + 1
                while end in self.comment_only and not section_title(self.comments[end]):
                    intro.append(self.comments[end])
                    end += 1
                if end <= len(lines) and lines[end - 1].strip():
                    intro = []  # the block describes the line under it
                found.append(Section(line, title, pages, " ".join(intro)))
        return found


@dataclass(frozen=True)
class Section:
    line: int
    title: str
    pages: list[str]
    intro: str


def section_title(comment: str) -> str | None:
    match = re.fullmatch(r"---\s+(.*?)\s*-*", comment)
    return match.group(1) if match else None


_SOURCES: dict[str, Source] = {}


def source(path: str) -> Source:
    if path not in _SOURCES:
        _SOURCES[path] = Source.load(path)
    return _SOURCES[path]


def module_path(module: str) -> str | None:
    base = module.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if (ROOT / candidate).is_file():
            return candidate
    return None


# --- plain values ---------------------------------------------------------------------------
def evaluate(node: ast.AST, src: Source, seen: frozenset[str] = frozenset()) -> Any:
    """The value of a default written as a literal, arithmetic on literals, or a constant
    of this or another raywatch module; Unknown for anything computed at start."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [evaluate(e, src, seen) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -evaluate(node.operand, src, seen)
    if isinstance(node, ast.BinOp):
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
               ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
               ast.FloorDiv: lambda a, b: a // b, ast.LShift: lambda a, b: a << b}
        op = ops.get(type(node.op))
        if op is None:
            raise Unknown
        return op(evaluate(node.left, src, seen), evaluate(node.right, src, seen))
    if isinstance(node, ast.Name):
        return constant(src, node.id, seen)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        module = imported_module(src, node.value.id)
        if module is not None:
            return constant(source(module), node.attr, seen)
    raise Unknown


def constant(src: Source, name: str, seen: frozenset[str]) -> Any:
    key = f"{src.path}:{name}"
    if key in seen:
        raise Unknown
    seen |= {key}
    values = [stmt.value for stmt in src.tree.body
              if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
              and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name]
    values += [stmt.value for stmt in src.tree.body
               if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
               and stmt.target.id == name and stmt.value is not None]
    if len(values) == 1:
        return evaluate(values[0], src, seen)
    if values:
        raise Unknown
    for stmt in src.tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    path = module_path(stmt.module)
                    if path is None:
                        raise Unknown
                    return constant(source(path), alias.name, seen)
    raise Unknown


def imported_module(src: Source, name: str) -> str | None:
    """The raywatch module a top-level name of `src` stands for, if it is one."""
    for stmt in src.tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    return module_path(f"{stmt.module}.{alias.name}")
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname == name:
                    return module_path(alias.name)
    return None


def show(value: Any, sep: str = ",") -> str:
    """A plain default as an operator would write it in the environment."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, list):
        return f"`{sep.join(str(v) for v in value)}`" if value else "empty"
    if value == "":
        return "empty"
    return f"`{value}`"


def number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


# --- reads ----------------------------------------------------------------------------------
@dataclass
class Read:
    """One place in the code that reads one variable."""

    name: str
    path: str
    line: int
    reader: str  # SERVER, AGENT, both of them ("both"), or DEMO
    kind: str = "text"
    code: str = ""  # the default's source text; "" when the code gives none
    shown: str = "unset"  # the default as the docs show it
    plain: bool = True  # the default is a plain value (or none), not computed
    minimum: str | None = None
    maximum: str | None = None
    choices: tuple[str, ...] = ()
    sep: str = ","
    schemes: tuple[str, ...] = ()
    secret: bool = False
    description: str = ""
    override: str | None = None  # a `default:` comment
    fallbacks: tuple[str, ...] = ()  # variables read when this one is unset

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def richness(self) -> tuple[bool, bool, bool]:
        return (bool(self.description), self.kind != "text", bool(self.code))


def env_name(node: ast.AST | None, pattern: re.Pattern[str] = ENV_NAME) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) \
            and pattern.fullmatch(node.value):
        return node.value
    return None


def is_environ(node: ast.AST) -> bool:
    """os.environ, or a mapping standing for it (`env`, `environ`)."""
    if isinstance(node, ast.Attribute) and node.attr == "environ":
        return True
    return isinstance(node, ast.Name) and node.id in {"env", "environ"}


def direct_read(node: ast.AST, pattern: re.Pattern[str] = ENV_NAME
                ) -> tuple[str, ast.expr | None] | None:
    """(name, default) when `node` reads a variable straight from the environment."""
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        getter = (isinstance(func, ast.Attribute) and func.attr == "get"
                  and is_environ(func.value)) or (
            isinstance(func, ast.Attribute) and func.attr == "getenv"
            and isinstance(func.value, ast.Name) and func.value.id == "os")
        name = env_name(node.args[0], pattern)
        if getter and name:
            return name, node.args[1] if len(node.args) > 1 else None
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
            and is_environ(node.value) and env_name(node.slice, pattern):
        return env_name(node.slice, pattern), None  # type: ignore[return-value]
    return None


def reader_of(path: str) -> str:
    if path.startswith("demo/"):
        return DEMO
    if path.startswith("collectors/agent/"):
        return AGENT
    if path.startswith("dashboard/"):
        return SERVER
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    server, agent = imports_reaching(module)
    if server == agent:  # both, or loaded by name only (collectors.simnvml: either side)
        return "both"
    return SERVER if server else AGENT


_GRAPH: dict[str, set[str]] = {}


def imports_reaching(module: str) -> tuple[bool, bool]:
    """Whether the server's code (dashboard.*) and the agent's (collectors.agent.*)
    import `module`, directly or through others."""
    if not _GRAPH:
        for path in python_files(("dashboard", "collectors")):
            name = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            edges = _GRAPH.setdefault(name, set())
            for node in ast.walk(source(path).tree):
                if isinstance(node, ast.Import):
                    edges.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    edges.add(node.module)
                    edges.update(f"{node.module}.{a.name}" for a in node.names)

    def reaches(roots: list[str]) -> bool:
        todo, seen = list(roots), set(roots)
        while todo:
            for nxt in _GRAPH.get(todo.pop(), ()):
                if nxt == module:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    return (reaches([m for m in _GRAPH if m.startswith("dashboard")]),
            reaches([m for m in _GRAPH if m.startswith("collectors.agent")]))


def python_files(roots: tuple[str, ...]) -> Iterator[str]:
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/migrations/" not in rel:
                yield rel


def reads_in(path: str) -> list[Read]:
    src = source(path)
    names = setting_names(src)
    helpers = set(HELPERS) if path == SETTINGS else set()
    unknown = {n.func.id for n in ast.walk(src.tree) if path == SETTINGS
               and isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
               and n.func.id.startswith("env_") and n.func.id not in HELPERS}
    if unknown:
        raise SettingsDocError(f"{path} calls {sorted(unknown)}: teach settingsdoc.HELPERS")
    found: list[Read] = []
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in helpers:
            found += helper_reads(src, node, names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in AGENT_HELPERS and len(node.args) >= 4 \
                and env_name(node.args[1]):
            read = new_read(src, node.args[1], AGENT_HELPERS[node.func.id], names)
            set_default(read, src, node, node.args[2], names)
            read.minimum = number(evaluate(node.args[3], src))
            for kw in node.keywords:
                if kw.arg == "maximum":
                    read.maximum = number(evaluate(kw.value, src))
            found.append(read)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == AGENT_FLAG and len(node.args) >= 3 \
                and env_name(node.args[1]):
            read = new_read(src, node.args[1], "boolean", names)
            set_default(read, src, node, node.args[2], names)
            found.append(read)
        else:
            direct = direct_read(node)
            if direct and not is_fallback(src, node):
                name_node = node.args[0] if isinstance(node, ast.Call) else node.slice
                read = new_read(src, name_node, "text", names)
                set_default(read, src, node, direct[1], names)
                found.append(read)
    return found


def setting_names(src: Source) -> dict[str, str]:
    """settings.py's own names for the variables it reads: SESSION_COOKIE_SECURE ->
    RAYWATCH_SECURE_COOKIES (a comment or a default that names one means the variable)."""
    if src.path != SETTINGS:
        return {}
    names = {}
    for stmt in src.tree.body:
        targets = [t.id for t in getattr(stmt, "targets", []) if isinstance(t, ast.Name)]
        calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id in HELPERS]
        if len(targets) == 1 and calls:
            names[targets[0]] = calls[0].args[0].value  # type: ignore[attr-defined]
    return names


def new_read(src: Source, name_node: ast.AST, kind: str, names: dict[str, str]) -> Read:
    name = name_node.value  # type: ignore[attr-defined]
    read = Read(name, src.path, name_node.lineno, reader_of(src.path), kind)
    lines = src.block_above(name_node.lineno)
    stmt = src.statement(name_node)
    if not lines and stmt.lineno != name_node.lineno and len(
            {n.value for n in ast.walk(stmt) if env_name(n)}) == 1:
        lines = src.block_above(stmt.lineno)
    lines += src.trailing(name_node.lineno)
    text = []
    for line in lines:
        if line.startswith("default:"):
            read.override = line.removeprefix("default:").strip()
        else:
            text.append(line)
    read.description = describe(" ".join(text), names)
    parent = src.parents.get(name_node)
    while isinstance(parent, ast.Call | ast.BoolOp | ast.Attribute):
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) \
                and parent.func.id in WRAPPERS and read.kind == "text":
            read.kind = WRAPPERS[parent.func.id]
            break
        parent = src.parents.get(parent)
    return read


def helper_reads(src: Source, call: ast.Call, names: dict[str, str]) -> list[Read]:
    helper = call.func.id  # type: ignore[attr-defined]
    kind, index = HELPERS[helper]
    read = new_read(src, call.args[0], kind, names)
    kwargs = {kw.arg: kw.value for kw in call.keywords}
    if "minimum" in kwargs:
        read.minimum = number(evaluate(kwargs["minimum"], src))
    if "sep" in kwargs:
        read.sep = evaluate(kwargs["sep"], src)
    if helper == "env_choice":
        read.choices = tuple(evaluate(call.args[1], src))
    if helper in ("env_url", "env_url_with_password"):
        read.schemes = tuple(evaluate(call.args[1], src))
    read.secret = helper == "env_secret"
    default = call.args[index] if index is not None and len(call.args) > index else None
    set_default(read, src, call, default, names)
    reads = [read]
    if helper == "env_url_with_password":
        password = new_read(src, call.args[2], "secret", names)
        password.secret = True
        finish_default(password, None, "unset", True)
        reads.append(password)
    return reads


def set_default(read: Read, src: Source, node: ast.AST, default: ast.expr | None,
                names: dict[str, str]) -> None:
    parent = src.parents.get(node)
    if default is None and isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or) \
            and parent.values[0] is node:
        rest = parent.values[1:]
        read.fallbacks = tuple(r[0] for r in map(direct_read, rest) if r)
        shown = [render(v, src, names, read.sep) for v in rest]
        code = " or ".join(src.segment(v) for v in rest)
        finish_default(read, code, ", else ".join(s for s, _ in shown),
                       all(p for _, p in shown))
        return
    if isinstance(parent, ast.IfExp) and parent.body is node and direct_read(parent.test) \
            and direct_read(parent.test)[0] == read.name:  # type: ignore[index]
        default = parent.orelse  # `helper(NAME) if env.get(NAME) else …`
    if default is None:
        finish_default(read, None, "unset", True)
        return
    shown, plain = render(default, src, names, read.sep)
    finish_default(read, src.segment(default), shown, plain)


def finish_default(read: Read, code: str | None, shown: str, plain: bool) -> None:
    read.code, read.shown, read.plain = code or "", shown, plain
    if read.override is not None:
        if plain and shown not in ("unset", "empty"):
            raise SettingsDocError(
                f"{read.where}: `default: {read.override}` for {read.name}, whose default is "
                f"the plain value {shown}: the page shows that; drop the comment")
        read.shown = describe(read.override, {})


def render(node: ast.expr, src: Source, names: dict[str, str], sep: str) -> tuple[str, bool]:
    """The default as the docs show it, and whether it is a plain value."""
    try:
        return show(evaluate(node, src), sep), True
    except Unknown:
        pass
    direct = direct_read(node, ANY_NAME)
    if direct:
        return f"`{direct[0]}`", False
    if isinstance(node, ast.Name) and node.id in names:
        return f"as `{names[node.id]}`", False
    if isinstance(node, ast.IfExp) and isinstance(node.test, ast.Name) \
            and node.test.id in names:
        body, orelse = render(node.body, src, names, sep), render(node.orelse, src, names, sep)
        return f"{body[0]} when `{names[node.test.id]}` is on, else {orelse[0]}", False
    code = src.segment(node)
    for python, env in names.items():
        code = re.sub(rf"\b{python}\b", env, code)
    return f"`{code}`", False


def describe(text: str, names: dict[str, str]) -> str:
    """A comment as the page shows it: settings.py's own names given as the variables they
    read (LOG_RESCAN_S -> `RAYWATCH_LOG_RESCAN_S`), variable names in backticks."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside `code`
        parts[i] = re.sub(
            r"\b[A-Z][A-Z0-9_]*[A-Z0-9]\b",
            lambda m: f"`{names.get(m.group(0), m.group(0))}`"
            if m.group(0) in names or ENV_NAME.fullmatch(m.group(0)) else m.group(0),
            parts[i])
    return "`".join(parts).strip()


def is_fallback(src: Source, node: ast.AST) -> bool:
    """`env.get(A) or env.get(B)`: B is read only when A is unset, part of A's default."""
    parent = src.parents.get(node)
    return (isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or)
            and parent.values[0] is not node and direct_read(parent.values[0]) is not None)


# --- settings -------------------------------------------------------------------------------
@dataclass
class Setting:
    """One variable, from every place that reads it."""

    name: str
    reads: list[Read]
    section: str
    description: str
    file_variant: bool

    @property
    def primary(self) -> Read:
        return self.reads[0]

    @property
    def readers(self) -> str:
        kinds = set()
        for read in self.reads:
            kinds |= {SERVER, AGENT} if read.reader == "both" else {read.reader}
        if kinds == {SERVER, AGENT}:
            return "server and node agent"
        return " and ".join(sorted(kinds))

    @property
    def default(self) -> str:
        shown = self.primary.shown
        agent = [r for r in self.reads if r.reader == AGENT]
        if self.primary.reader != AGENT and agent and agent[0].shown != shown:
            shown += f" (node agent: {agent[0].shown})"
        return shown

    @property
    def kind(self) -> str:
        read = self.primary
        if self.file_variant and read.kind == "text":
            return "secret"
        kind = {
            "choice": "one of " + ", ".join(f"`{c}`" for c in read.choices),
            "list": ("colon" if read.sep == ":" else "comma") + "-separated list",
            "networks": "comma-separated addresses or networks (CIDR)",
            "URL": "URL" + (": " + ", ".join(f"`{s}://`" for s in read.schemes)
                            if read.schemes else ""),
        }.get(read.kind, read.kind)
        if read.minimum is not None and read.maximum is not None:
            kind += f", {read.minimum} to {read.maximum}"
        elif read.minimum is not None:
            kind += f" ≥ {read.minimum}"
        agent = [r for r in self.reads if r.reader == AGENT and r.minimum is not None]
        if read.reader != AGENT and agent and agent[0].minimum != read.minimum:
            kind += f" (node agent: ≥ {agent[0].minimum})"
        return kind


def priority(read: Read) -> tuple[int, tuple[bool, bool, bool]]:
    order = [SETTINGS, AGENT_CONFIG]
    rank = order.index(read.path) if read.path in order else (
        2 if read.reader == SERVER else 3 if read.reader == AGENT else 4)
    return rank, tuple(not x for x in read.richness)  # type: ignore[return-value]


def collect() -> list[Setting]:
    """Every variable raywatch reads, in the order of the page."""
    check_helpers()
    reads: dict[str, list[Read]] = {}
    for path in python_files(SCANNED):
        for read in reads_in(path):
            reads.setdefault(read.name, []).append(read)
    agent_section = source(AGENT_CONFIG).sections()[0].title
    settings = []
    for name, found in reads.items():
        base = name.removesuffix("_FILE")
        if name.endswith("_FILE") and base in reads:
            continue  # NAME_FILE: NAME read from a file, documented with NAME
        found.sort(key=priority)
        primary = found[0]
        description = primary.description or next(
            (r.description for r in found if r.description), "")
        agent_own = [r for r in found if r.reader == AGENT and r.description]
        if primary.reader != AGENT and agent_own and agent_own[0].description != description:
            description += f" On a node agent: {agent_own[0].description}"
        if primary.path == SETTINGS:
            section = section_of(SETTINGS, primary.line)
        elif primary.path == AGENT_CONFIG:
            section = section_of(AGENT_CONFIG, primary.line)
        elif name in ELSEWHERE:
            section = ELSEWHERE[name][0]
        elif primary.reader == AGENT:
            section = agent_section
        else:
            raise SettingsDocError(
                f"{primary.where} reads {name}: add it to settingsdoc.ELSEWHERE "
                "(its section and description) or read it in dashboard/settings.py")
        if name in ELSEWHERE:
            if primary.path in OWN:
                raise SettingsDocError(f"settingsdoc.ELSEWHERE describes {name}, which "
                                       f"{primary.path} reads: describe it there instead")
            description = description or ELSEWHERE[name][1]
        settings.append(Setting(name, found, section, description,
                                any(r.secret for r in found) or f"{name}_FILE" in reads))
    stale = set(ELSEWHERE) - set(reads)
    if stale:
        raise SettingsDocError(f"settingsdoc.ELSEWHERE describes {sorted(stale)}, which "
                               "nothing reads any more")
    titles = [s.title for s in section_order()]
    settings.sort(key=lambda s: (titles.index(s.section), s.primary.path != SETTINGS
                                 and s.primary.path != AGENT_CONFIG, s.primary.line
                                 if s.primary.path in OWN else 0, s.name))
    return settings


def check_helpers() -> None:
    defined = {n.name for n in source(ENVCONF).tree.body
               if isinstance(n, ast.FunctionDef) and n.name.startswith("env_")}
    if defined != set(HELPERS):
        raise SettingsDocError(f"{ENVCONF} defines {sorted(defined)}; settingsdoc.HELPERS "
                               f"knows {sorted(HELPERS)}")


def section_order() -> list[Section]:
    order = source(SETTINGS).sections() + source(AGENT_CONFIG).sections()
    for title, _ in ELSEWHERE.values():
        if title not in (s.title for s in order):
            order.append(Section(0, title, [], ""))
    return order


def section_of(path: str, line: int) -> str:
    found = [s.title for s in source(path).sections() if s.line < line]
    if not found:
        raise SettingsDocError(f"{path}:{line}: no `# --- section ---` comment above it")
    return found[-1]


# --- the page -------------------------------------------------------------------------------
INTRO = """\
# Settings

<!-- Generated from the code by `python -m dashboard.settingsdoc` (make settings-doc).
     Do not edit: change the comments in dashboard/settings.py or
     collectors/agent/config.py and regenerate. -->

Every setting is an environment variable. raywatch's server reads its settings once at
start (`dashboard/settings.py`), the node agent (`python -m collectors.agent`) its own
(`collectors/agent/config.py`); a malformed value stops either one at start with a message
that names the variable. A secret can come from a file instead: `NAME_FILE` names the file
(Docker secrets); set one of the two.

This page is generated from the code: each default as the code has it, each description
from the comment above the line that reads the variable. To change a description, edit
that comment, then run `make settings-doc` (or `python -m dashboard.settingsdoc`);
`tests/test_settings_doc.py` fails while this page is stale, or while a variable the code
names is missing from it.
"""


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_page(settings: list[Setting]) -> str:
    blocks = [INTRO.rstrip("\n")]  # paragraphs, headings and tables, a blank line apart
    count: dict[str, int] = {}
    for s in settings:
        count[s.readers] = count.get(s.readers, 0) + 1
    parts = ", ".join(f"{n} by `make demo`" if who == DEMO else f"{n} by the {who}"
                      for who, n in sorted(count.items(), key=lambda kv: -kv[1]))
    blocks.append(f"{len(settings)} variables: {parts}.")
    agent_section = source(AGENT_CONFIG).sections()[0].title
    names = setting_names(source(SETTINGS))
    for section in section_order():
        rows = [s for s in settings if s.section == section.title]
        if not rows:
            continue
        blocks.append(f"## {section.title[0].upper()}{section.title[1:]}")
        if section.intro:
            blocks.append(describe(section.intro, names))
        if section.pages:
            links = ", ".join(f"[{p}]({p.removeprefix('docs/')})" for p in section.pages)
            blocks.append(f"See {links}.")
        if section.title == agent_section:
            shared = [s.name for s in settings
                      if s.section != section.title and AGENT in s.readers]
            blocks.append("The node agent also reads " + ", ".join(f"`{n}`" for n in shared)
                          + " (above, marked *server and node agent*).")
        table = ["| variable | default | what it does |", "|---|---|---|"]
        for s in rows:
            variable = f"`{s.name}`" + (f", `{s.name}_FILE`" if s.file_variant else "")
            meta = s.kind + ("" if s.readers == SERVER else f"; {s.readers}")
            table.append(f"| {variable} | {cell(s.default)} | "
                         f"{cell(sentence(s.description))} *({cell(meta)})* |")
        blocks.append("\n".join(table))
    return "\n\n".join(blocks) + "\n"


def sentence(text: str) -> str:
    text = text.strip()
    return text + "." if text and text[-1] not in ".!?)" else text


def generate() -> str:
    _SOURCES.clear()
    _GRAPH.clear()
    return render_page(collect())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboard.settingsdoc",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 with a diff when {DOC} is not what the code says")
    args = parser.parse_args(argv)
    try:
        text = generate()
    except SettingsDocError as exc:
        print(f"settingsdoc: {exc}", file=sys.stderr)
        return 2
    path = ROOT / DOC
    if args.check:
        current = path.read_text() if path.exists() else ""
        if current == text:
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(keepends=True), text.splitlines(keepends=True),
            f"{DOC} (as it is)", f"{DOC} (from the code)"))
        print(f"\n{DOC} is stale: run `make settings-doc`", file=sys.stderr)
        return 1
    path.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
