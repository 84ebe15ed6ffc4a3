"""Find every code fence in the docs and say what kind it is, so that the tests can run each one and
the coverage test can fail on any that nothing runs. KINDS below names each kind and what executing
it means: this is the one list (the package's docstring and the testing page point here, and a test holds the
page's table to it).

A command that is meant to fail, as the debugging guide's broken examples do, says so in its info
string: `{.bash exit="1"}` is the exit code it must end with, and `within="30"` the seconds it must
end within. Any command may also say `busy_port="29500"`: a port the test holds open on 127.0.0.1
while it runs, as another job would; and `fault="kill-rank=1 kill-at-step=13"` a fault that the test
injects into the ranks (docexec.fault_injection.fault_env), where the page tells the reader how to cause it
by hand: the example itself carries none. Under a content tab titled "GPU ..." a command runs only where
CUDA is present.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

# Every kind of fence, decided from the fence alone: what it is, and what executing it means. Which
# test runs which kind is the tests' business (the testing page's table says it to a reader).
KINDS = {
    "include": "its body has a `--8<--` line (pymdownx.snippets): the example it names runs whole, by "
    "the command in its docstring; Python includes carry `notest`, since pytest-markdown-docs would run the line",
    "inline": "a python fence that pytest-markdown-docs collects and runs",
    "command": "a shell fence whose every line starts with torchrun, python or distdocs, perhaps "
    "after `NAME=value` settings (or is `wait`, after commands started with `&`): run exactly as written",
    "output": 'a `text` fence titled "Output" after a command: all that the command prints on stdout, '
    "compared with a fresh run",
    "excerpt": 'a `text` fence titled "Excerpt" after a command: lines among what it prints (an error, '
    "say), each found in its output, numbers aside",
    "node command": 'a command fence with `node="ADDRESS"`: one of the commands two machines would run; '
    "a page's node commands run together, each in a network namespace with that address on `eth0`",
    "node excerpt": 'a `text` fence titled "Excerpt" after a node command: lines that node printed',
    "slurm command": "a `{.bash slurm}` fence of sbatch, scancel or scontrol lines: run as written on the "
    "controller of a SLURM cluster of network namespaces",
    "slurm excerpt": 'a `text` fence titled "Excerpt" after a slurm command: lines of the job\'s log',
    "not executed": "the fence sits right under `<!-- not executed: REASON -->`; keep these rare",
    "unverified": "none of the above: the suite fails while any fence is one",
}

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
EXAMPLES = REPO / "examples"
SNIPPET_BASES = (EXAMPLES, REPO / "src", REPO / "measurements", REPO / "tests", REPO / "includes")  # as in mkdocs.yml

SHELL_LANGS = {"bash", "sh", "shell", "console"}
COMMAND_PREFIXES = ("torchrun ", "python ", "python3 ", "distdocs")
SLURM_PREFIXES = ("sbatch ", "scancel ", "scontrol ")
NOT_EXECUTED = re.compile(r"^<!--\s*not executed:\s*(.*?)\s*-->$")
INCLUDE = re.compile(r"""--8<--\s+["']([^"']+)["']""")
OPEN = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
# Environment variables set for one command, as in `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun ...`.
ENV_PREFIX = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+")
FAILURE_ATTRS = ("exit", "within", "busy_port", "fault")  # see the module's docstring
ORCHESTRATED = ("slurm command", "node command")  # run by tests that set the scene; their excerpts are checked there
TAB = re.compile(r"""^(\s*)===\+?\s+"(.*)"\s*$""")


@dataclass
class Fence:
    path: Path
    line: int  # 1-based line of the opening ``` line
    info: str
    body: str
    lang: str = ""
    options: set[str] = field(default_factory=set)
    attrs: dict[str, str] = field(default_factory=dict)
    reason: str | None = None  # from <!-- not executed: ... -->
    tab: str | None = None  # title of the content tab the fence sits in
    kind: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def includes(self) -> list[str]:
        return INCLUDE.findall(self.body)

    @property
    def gpu(self) -> bool:
        return bool(self.tab and "GPU" in self.tab)

    @property
    def command(self) -> str:
        return self.body.strip()


def parse_info(info: str) -> tuple[str, set[str], dict[str, str]]:
    """Split a fence's info string, in either `lang opt k="v"` or superfences' `{.lang opt k="v"}`."""
    info = info.strip()
    braces = info.startswith("{")
    tokens = shlex.split(info.strip("{}"))
    lang, options, attrs = "", set(), {}
    for i, tok in enumerate(tokens):
        if "=" in tok:
            key, value = tok.split("=", 1)
            attrs[key] = value
        elif braces and tok.startswith(".") and not lang:
            lang = tok[1:]
        elif not braces and i == 0:
            lang = tok
        else:
            options.add(tok.lstrip("."))
    return lang, options, attrs


def _tab_title(lines: list[str], index: int, indent: int) -> str | None:
    for j in range(index - 1, -1, -1):
        m = TAB.match(lines[j])
        if m and len(m.group(1)) < indent:
            return m.group(2)
        if lines[j].strip() and len(lines[j]) - len(lines[j].lstrip()) < indent and not m:
            return None
    return None


def _reason(lines: list[str], index: int) -> str | None:
    j = index - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    m = NOT_EXECUTED.match(lines[j].strip()) if j >= 0 else None
    return m.group(1) if m else None


def parse_fences(path: Path) -> list[Fence]:
    lines = path.read_text().splitlines()
    fences: list[Fence] = []
    i = 0
    while i < len(lines):
        m = OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, marker, info = m.group(1), m.group(2), m.group(3)
        close = re.compile(rf"^\s*{re.escape(marker[0])}{{{len(marker)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = "\n".join(line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[i + 1 : j])
        lang, options, attrs = parse_info(info)
        fences.append(
            Fence(
                path,
                i + 1,
                info,
                body + "\n",
                lang,
                options,
                attrs,
                _reason(lines, i),
                _tab_title(lines, i, len(indent)),
            )
        )
        i = j + 1
    return fences


def markdown_docs_lines(path: Path) -> set[int]:
    """The opening lines of the fences that pytest-markdown-docs itself will run in `path`."""
    from markdown_it import MarkdownIt
    from pytest_markdown_docs.plugin import FenceSyntax, extract_fence_tests

    tests = extract_fence_tests(
        MarkdownIt("commonmark"), path.read_text(), 0, path, fence_syntax=FenceSyntax.superfences
    )
    return {t.start_line for t in tests}


def is_command(fence: Fence, prefixes: tuple[str, ...] = COMMAND_PREFIXES) -> bool:
    lines = [ln.strip() for ln in fence.body.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return (
        fence.lang in SHELL_LANGS
        and bool(lines)
        and all(ENV_PREFIX.sub("", ln).startswith(prefixes) or ln == "wait" for ln in lines)
    )


def classify(path: Path) -> list[Fence]:
    """Every fence of one page, each with its `kind`, or kind "unverified" when nothing runs it."""
    inline = markdown_docs_lines(path)
    fences = parse_fences(path)
    previous: Fence | None = None
    for fence in fences:
        if fence.includes:
            fence.kind = "include"
        elif fence.line in inline:
            fence.kind = "inline"
        elif "slurm" in fence.options and is_command(fence, SLURM_PREFIXES):
            fence.kind = "slurm command"
        elif is_command(fence):
            fence.kind = "node command" if "node" in fence.attrs else "command"
        elif fence.attrs.get("title") == "Excerpt" and getattr(previous, "kind", "") in (
            "slurm command",
            "node command",
        ):
            fence.kind = previous.kind.replace("command", "excerpt")
            fence.attrs["after"] = previous.command
        elif (
            fence.lang == "text"
            and fence.attrs.get("title") in ("Output", "Excerpt")
            and previous
            and previous.kind == "command"
        ):
            fence.kind = fence.attrs["title"].lower()
            fence.attrs["after"] = previous.command
            fence.attrs.update({k: v for k, v in previous.attrs.items() if k in FAILURE_ATTRS})
            fence.tab = fence.tab or previous.tab
        elif fence.reason:
            fence.kind = "not executed"
        else:
            fence.kind = "unverified"
        if fence.kind not in ("output", "excerpt", "slurm excerpt", "node excerpt"):
            previous = fence
    return fences


def all_fences() -> list[Fence]:
    return [f for page in sorted(DOCS.rglob("*.md")) for f in classify(page)]


def resolve_include(target: str) -> tuple[Path | None, str | None]:
    """`file.py:section` to (the file under a snippet base path, the section name)."""
    name, _, section = target.partition(":")
    for base in SNIPPET_BASES:
        if (base / name).is_file():
            return base / name, section or None
    return None, section or None


def example_command(script: Path) -> str:
    """The launch command in an example's docstring: its first line that starts with `torchrun`, after
    any environment variables it sets, or with `python ` for a script that runs as one process (the
    one-process starting point that the convert page makes distributed)."""
    import ast

    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    for line in doc.splitlines():
        if ENV_PREFIX.sub("", line.strip()).startswith(("torchrun ", "python ")):
            return line.strip()
    raise AssertionError(f"{script.relative_to(REPO)}: its docstring gives no `torchrun ...` launch command")


def all_examples() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*.py") if p.name != "__init__.py")


def page_command(page: str, contains: str) -> str:
    """The one command fence of `page` (docs/...md) that contains `contains`, as written: what
    a test runs to check what that fence prints. docexec.claims counts a fence as checked by the
    test files that call this with its page."""
    found = [f.command for f in classify(REPO / page) if f.kind == "command" and contains in f.command]
    if len(found) != 1:
        raise LookupError(f"{page}: {len(found)} command fences contain {contains!r}, not one")
    return found[0]


def page_fences(page: str, kind: str) -> list[Fence]:
    """Every fence of `kind` on `page` (docs/...md), in order: for a test that runs them together (the
    node commands of two machines) and checks what they print. docexec.claims counts them as
    checked by the test files that call this with their page and kind."""
    return [f for f in classify(REPO / page) if f.kind == kind]
