"""How long a page takes a reader: the one rule behind the route times on the home page.

The testing appendix states it for readers; this module is it:

- **prose** at 200 words a minute: the words outside code, HTML comments, quizzes and collapsed
  blocks;
- **code** at 20 lines a minute: every inline block and every included example section the page
  shows open;
- **an exercise**, 5 minutes to work it; **a quiz question**, 1 minute;
- **a command**, a minute to start it and read what it prints, plus its run time: measured, in
  `measurements/command-times.json` (`python -m tools.command_times`), since a command that trains for
  a minute takes a minute whoever reads it. A notebook's code cells run as one command. Commands
  that two machines or a cluster run count the minute alone; of a CPU and a GPU tab, the CPU's.

What a page folds away (`??? note "How this was measured"`, the whole file behind a partial include,
an exercise's solution) is there for the reader who opens it; a route does not count it. A page's
time rounds up to the minute.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the fence classifier lives in the repository's engine, docexec
    sys.path.insert(0, str(REPO))

from docexec.fences import SNIPPET_BASES, classify, parse_fences  # noqa: E402

DOCS = REPO / "docs"
COMMAND_TIMES = REPO / "measurements/command-times.json"
WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 20
EXERCISE_MINUTES = 5
QUIZ_QUESTION_MINUTES = 1
COMMAND_MINUTES = 1  # to start it and read its output; its run time comes on top
NOTEBOOK = "notebook"  # the key of a notebook's run in command-times.json: "notebook: PAGE"

WORD = re.compile(r"[A-Za-z0-9]+")
COLLAPSED = re.compile(r"^([ \t]*)\?\?\?\+? .*\n(?:(?:\1    .*|[ \t]*)\n)*", re.M)
DETAILS = re.compile(r"<details.*?</details>", re.S)
QUIZ = re.compile(r"<quiz>.*?</quiz>", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
EXERCISE = re.compile(r"^#{2,4} Exercise\b", re.M)
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[ \t]*$", re.M | re.S)
SECTION = re.compile(r"^(?P<file>[^:]+?)(?::(?P<section>[\w-]+))?$")


def command_times() -> dict[str, float]:
    """Each command's measured run time in seconds, by the page it is on and its text."""
    return json.loads(COMMAND_TIMES.read_text())["seconds"] if COMMAND_TIMES.exists() else {}


def command_key(page: str, command: str) -> str:
    return f"{page}: {command}"


def _open_text(text: str) -> str:
    """The page as it reads unopened: collapsed blocks, solutions, quizzes and comments removed."""
    for pattern in (COMMENT, COLLAPSED, DETAILS):
        text = pattern.sub("", text)
    return text


def included_lines(target: str) -> int:
    """Lines of an included file, or of its named section (`path:section`)."""
    found = SECTION.match(target)
    for base in SNIPPET_BASES:
        path = base / found["file"]
        if path.exists():
            lines = path.read_text().splitlines()
            if found["section"]:
                start, end = f"[start:{found['section']}]", f"[end:{found['section']}]"
                at = [i for i, line in enumerate(lines) if start in line or end in line]
                lines = lines[at[0] + 1 : at[-1]] if len(at) == 2 else []
            return sum(1 for line in lines if line.strip() and "--8<--" not in line)
    return 0


def _markdown_parts(path: Path) -> dict[str, float]:
    raw = path.read_text()
    opened = _open_text(raw)
    fences = {f.line: f for f in classify(path)}
    code_lines, commands, timed = 0, [], []
    for fence in parse_fences(path):
        classified = fences.get(fence.line)
        if fence.body not in opened or (classified and (classified.tab or "").startswith("GPU")):
            continue  # folded away, or the GPU tab beside the CPU one that is counted
        kind = classified.kind if classified else ""
        if kind in ("command", "node command", "slurm command"):
            commands.append(fence.body.strip())
            if kind == "command":  # machines or a cluster run the others, in a scene a test sets
                timed.append(fence.body.strip())
        elif kind == "include":
            code_lines += sum(included_lines(t) for t in fence.includes)
        elif kind not in ("output", "excerpt", "node excerpt", "slurm excerpt"):
            code_lines += sum(1 for line in fence.body.splitlines() if line.strip())
    return {
        "words": len(WORD.findall(FENCE.sub("", QUIZ.sub("", opened)))),
        "code_lines": code_lines,
        "exercises": len(EXERCISE.findall(raw)),
        "quiz_questions": raw.count("<quiz>"),
        "commands": commands,
        "timed_commands": timed,
    }


def _notebook_parts(path: Path) -> dict[str, float]:
    cells = re.split(r"^# %%(.*)$", path.read_text(), flags=re.M)
    markdown = [b for k, b in zip(cells[1::2], cells[2::2]) if "[markdown]" in k]
    code = [b for k, b in zip(cells[1::2], cells[2::2]) if "[markdown]" not in k and b.strip()]
    text = "\n".join(markdown)
    return {
        "words": len(WORD.findall(QUIZ.sub("", _open_text(text)))),
        "code_lines": sum(1 for b in code for line in b.splitlines() if line.strip()),
        "exercises": len(EXERCISE.findall(re.sub(r"^# ", "", text, flags=re.M))),
        "quiz_questions": text.count("<quiz>"),
        "commands": [NOTEBOOK],
        "timed_commands": [NOTEBOOK],
    }


def page_parts(page: str) -> dict:
    """What the rule counts on a page (a path under docs/)."""
    path = DOCS / page
    return _notebook_parts(path) if path.suffix == ".py" else _markdown_parts(path)


def page_minutes(page: str, times: dict[str, float] | None = None) -> int:
    """The page's reading time by the rule, in whole minutes."""
    times = command_times() if times is None else times
    parts = page_parts(page)
    run_s = sum(times.get(command_key(page, c), 0.0) for c in parts["commands"])
    total = (
        parts["words"] / WORDS_PER_MINUTE
        + parts["code_lines"] / CODE_LINES_PER_MINUTE
        + parts["exercises"] * EXERCISE_MINUTES
        + parts["quiz_questions"] * QUIZ_QUESTION_MINUTES
        + len(parts["commands"]) * COMMAND_MINUTES
        + run_s / 60
    )
    return math.ceil(total - 1e-9)


def said(total: int) -> str:
    """Minutes as the home page says them: 45 minutes, 1 hour 15 minutes, 4 hours."""
    hours, rest = divmod(total, 60)
    if not hours:
        return f"{total} minutes"
    unit = "hour" if hours == 1 else "hours"
    return f"{hours} {unit}" + (f" {rest} minutes" if rest else "")
