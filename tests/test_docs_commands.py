"""Docs that run as written (issue 34, item 3): every `hydranet ...` line in a shell block of README.md and
docs/*.md is parsed by the real argparse parser (`hydranet.cli.main.build_parser`), so a renamed or removed
flag fails here, and every path under out/demo/ it names is one that `make demo` writes.

How a docs line is read: fenced blocks tagged bash/sh/shell/console or untagged; a leading "$ " prompt is
dropped, lines ending in "\\" continue, "# ..." comments are dropped; optional parts in [brackets] count as
given, "a|b" alternatives as their first, "..." elisions are dropped, and an upper-case placeholder (N, K,
ID) given to a numeric flag counts as 1. A line that lists subcommands (`hydranet engine fleet|ingest|...`)
checks that each one exists."""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from hydranet.cli.main import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
SHELL = ("", "bash", "sh", "shell", "console")
PLACEHOLDER = re.compile(r"invalid (?:int|float) value: '([A-Z][A-Z_0-9]*)'")
# what `make demo` writes under out/demo (hydranet/cli/demo.py), first two levels
DEMO_OUTPUTS = {"sim", "sim_val", "preview.png", "run", "metrics.json", "predictions", "predictions.png", "deploy",
                "deploy/model.onnx", "deploy/model.int8.onnx", "deploy/metrics.int8.json", "deploy/bench", "engine",
                "engine/catalog.sqlite", "engine/loop.json", "engine/models", "engine/rounds", "engine/suites"}


def doc_commands(path: Path) -> list[tuple[int, str]]:
    """(line number, command) of every `hydranet ...` line in the shell blocks of `path`."""
    out, inblock, lang, buf, start = [], False, "", "", 0
    for i, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence:
            inblock, lang = not inblock, fence.group(1)
            continue
        if not inblock or lang not in SHELL:
            continue
        s = line.strip().removeprefix("$ ")
        if buf:
            buf += " " + s
        elif s.startswith("hydranet "):
            buf, start = s, i
        else:
            continue
        if buf.endswith("\\"):
            buf = buf[:-1]
            continue
        out.append((start, buf))
        buf = ""
    return out


CASES = [pytest.param(cmd, id=f"{p.relative_to(REPO)}:{n}") for p in DOCS for n, cmd in doc_commands(p)]


def parse(argv: list[str]) -> str | None:
    """None when the parser accepts `argv` under the current spellings, else its error line (or its deprecation
    warning: the docs show the flags as they are now, hydranet/cli/flags.py)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as e:
        if e.code:
            return err.getvalue().strip().splitlines()[-1]
    warned = [line for line in err.getvalue().splitlines() if "is deprecated" in line]
    return warned[0] if warned else None


def test_the_docs_have_commands():
    assert len(CASES) > 80, f"only {len(CASES)} hydranet command lines found in README.md and docs/"


@pytest.mark.parametrize("command", CASES)
def test_doc_command_parses(command: str):
    words = [w.strip("[]") for w in shlex.split(command, comments=True)[1:]]
    words = [w for w in words if w and w != "..."]
    listed = next((i for i, w in enumerate(words[:2]) if "|" in w and not w.startswith("-")), None)
    if listed is not None:  # a list of subcommands: each must exist
        for sub in words[listed].split("|"):
            assert parse([*words[:listed], sub, "--help"]) is None, f"no subcommand `{sub}`: {command}"
        return
    argv = [w.split("|")[0] if "|" in w and not w.startswith("--set") else w for w in words]
    for _ in range(len(argv)):
        error = parse(argv)
        placeholder = PLACEHOLDER.search(error or "")
        if placeholder is None:
            break
        argv = ["1" if w == placeholder.group(1) else w for w in argv]
    assert error is None, f"{error}\n  in: {command}"
    unknown = unknown_demo_paths(argv)
    assert not unknown, f"`make demo` writes no {unknown[0]}\n  in: {command}"


def unknown_demo_paths(argv: list[str]) -> list[str]:
    """The out/demo/... paths of `argv` (as values or in KEY=out/demo/...) that `make demo` does not write."""
    bad = []
    for w in argv:
        for path in re.findall(r"(?:^|=)out/demo/([^\s,]+)", w):
            parts = Path(path).parts
            if not ("/".join(parts[:2]) in DEMO_OUTPUTS or (parts[0] in DEMO_OUTPUTS and len(parts) > 2)):
                bad.append(f"out/demo/{path}")
    return bad


def test_a_renamed_flag_is_caught():
    """The check can fail: a flag the parser does not know is an error line."""
    assert "unrecognized arguments: --url" in parse(["engine", "label", "--catalog", "c.db", "--selection", "s",
                                                     "--backend", "files", "--url", "x"])


def test_an_old_spelling_in_the_docs_is_caught():
    """A flag renamed for one meaning per flag still parses for users, with a warning the docs may not trigger."""
    assert parse(["quantize", "--model", "m.onnx", "--data", "d", "--out", "o.onnx"]) == \
        "warning: hydranet quantize --model is deprecated and goes in the next release; use --onnx"
    assert parse(["quantize", "--onnx", "m.onnx", "--data", "d", "--out", "o.onnx"]) is None


def test_a_path_the_demo_does_not_write_is_caught():
    assert unknown_demo_paths(["--production", "out/demo/runs/hydranet", "--set", "data.root=out/demo/sim"]) == \
        ["out/demo/runs/hydranet"]
