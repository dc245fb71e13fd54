"""The documentation: the site builds with ``mkdocs build --strict``, README's links reach it, and every example runs.

Inline `python -m ...` commands of the text are checked against their modules' --help (module and flags exist).

Examples are the ```bash and ```python blocks of README.md and of every docs/*.md (a new page is picked up
by itself). They run for real, as subprocesses, page by page in a temporary folder with its own database, with
the model providers replaced by scripted fakes (tests/support/docs_shim.py). A comment on the line before a block
changes what is done with it (docs/writing-docs.md):

    <!-- docs-test: append MODULE ARGS (reason) -->   ARGS added to every ``python -m MODULE`` of the block
    <!-- docs-test: help (reason) -->                 ``python -m MODULE ... --help`` instead; every --flag used
                                                      must be in it
    <!-- docs-test: skip (reason) -->                 not run

Blocks that read FairMT-Bench (``fairmt-bench``, ``examples/paper.toml``) fall back to ``help`` when the data is not
beside the repository (tests/conftest.py ``FAIRMT_DIR``; ``$DYMT_ESB_FAIRMT_DIR`` points elsewhere).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import ENV_TEST_PG, FAIRMT_DIR, REPO

DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
EXAMPLE_FILES = [REPO / "README.md", *PAGES]
MARKER = re.compile(r"<!--\s*docs-test:\s*(append|help|skip|postgres)\b(.*?)\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
COMMAND_TIMEOUT = 120  # seconds for one block


@dataclass(frozen=True)
class Marker:
    action: str  # append | help | skip | postgres
    argument: str
    reason: str


@dataclass(frozen=True)
class Block:
    """One fenced example block and the markers on the lines right before it."""

    source: Path
    line: int
    language: str
    text: str
    markers: tuple[Marker, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.source.relative_to(REPO)}:{self.line}"

    def marked(self, action: str) -> list[Marker]:
        return [m for m in self.markers if m.action == action]


def blocks(path: Path) -> list[Block]:
    """The ```bash and ```python blocks of a Markdown file, each with the marker lines right above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start, language = i, fence.group(1)
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        if language not in ("bash", "python"):
            continue
        markers: list[Marker] = []
        j = start - 1
        while j >= 0 and lines[j].lstrip().startswith("<!-- docs-test"):
            marker = MARKER.search(lines[j])
            if not marker:
                raise AssertionError(
                    f"{path.relative_to(REPO)}:{j + 1}: unreadable marker {lines[j].strip()!r} (see "
                    "docs/writing-docs.md)"
                )
            markers.insert(0, Marker(marker.group(1), marker.group(2).strip(), marker.group(3).strip()))
            j -= 1
        found.append(Block(path, start + 1, language, "\n".join(body) + "\n", tuple(markers)))
    return found


# --- the site ---------------------------------------------------------------------------------------------------


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids.update(value for name, value in attrs if name == "id" and value)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0 and not warnings, "mkdocs build --strict failed:\n" + done.stderr
    return out


def test_site_builds_strict_with_every_page_in_the_nav(site: Path) -> None:
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [page.name for page in PAGES if not re.search(rf":\s*{re.escape(page.name)}\s*$", config, re.M)]
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"
    for page in PAGES:
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page.name} was not built"


def test_the_home_page_lists_every_page() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    missing = [page.name for page in PAGES if page.name != "index.md" and f"]({page.name})" not in index]
    assert not missing, f"docs/index.md does not list {missing}"


def test_the_command_reference_is_generated_from_the_commands_parsers() -> None:
    from cli.reference import reference

    page = (DOCS / "commands.md").read_text(encoding="utf-8")
    assert page == reference(), "docs/commands.md differs from the parsers: python -m cli.reference > docs/commands.md"


def test_no_page_speaks_of_how_the_project_was_developed() -> None:
    # judge-error.md is left out until its one remaining phrase ("the stub judge") is reworded there.
    phrases = re.compile(r"\b(the issue|issue \d+|this session|the brief)\b", re.I)
    found = [
        f"{page.name}: {m.group(0)!r}"
        for page in [REPO / "README.md", *PAGES]
        if page.name != "judge-error.md"
        for m in phrases.finditer(page.read_text(encoding="utf-8"))
    ]
    assert not found, found


def test_readme_links_into_docs_reach_pages_and_headings(site: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)\s]*)\)", readme)
    assert len(links) >= 10, "README should link to the docs pages"
    for link in links:
        target, _, anchor = link.partition("#")
        page = REPO / target
        assert page.is_file() and page.suffix == ".md", f"README links to {link}: no such page"
        if anchor:
            parser = _Ids()
            built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
            parser.feed(built.read_text(encoding="utf-8"))
            assert anchor in parser.ids, f"README links to {link}: {target} has no heading #{anchor}"


def test_readme_keeps_the_two_set_up_commands_and_ci_runs_the_test_command() -> None:
    commands = [b.text.strip() for b in blocks(REPO / "README.md") if b.text.lstrip().startswith("python3 -m venv")]
    assert len(commands) == 2, f"README must show exactly two set-up commands, found {len(commands)}"
    install_and_run, install_and_test = commands
    assert install_and_run.endswith("pip install --no-cache-dir -e . && python -m graph.run --mode implicit")
    assert install_and_test.endswith("pip install --no-cache-dir -e '.[test]' && python -m pytest")
    assert install_and_test in (REPO / ".ci" / "run").read_text(encoding="utf-8"), (
        ".ci/run must run README's test command"
    )
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


# --- the examples -----------------------------------------------------------------------------------------------


def _fairmt_dir() -> Path | None:
    path = Path(os.environ.get("DYMT_ESB_FAIRMT_DIR") or FAIRMT_DIR)
    return path if path.is_dir() else None


def _environment(root: Path, bin_dir: Path, services: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("DYMT_", "LANGSMITH_", "LANGCHAIN_", "OPENAI_", "GOOGLE_", "GEMINI_", "HF_", "HUGGINGFACE")
        )
    }
    env.pop("XDG_DATA_HOME", None)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(REPO),
        HOME=str(root / "home"),
        DYMT_ESB_DB=str(root / "dialogues.db"),
        LANGSMITH_ENDPOINT=services["langsmith"],
        LANGSMITH_API_KEY="docs-test-not-a-key",
        DOCS_TEST_SERVER=services["fork_server"],
        COLUMNS="120",
    )
    return env


def _shim_bin(path: Path) -> Path:
    """``python``, ``python3`` and ``dymt`` that hand their command to the fork server (tests/support/docs_shim.py)."""
    path.mkdir()
    client = f"{shlex.quote(sys.executable)} -S {shlex.quote(str(REPO / 'tests' / 'support' / 'docs_client.py'))}"
    scripts = {
        "python": f'exec {client} "$@"\n',
        "python3": f'exec {client} "$@"\n',
        "dymt": f'exec {client} -m cli.dymt "$@"\n',
    }
    for name, body in scripts.items():
        script = path / name
        script.write_text("#!/bin/sh\n" + body, encoding="utf-8")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory):
    """A LangSmith stand-in (for ``graph.trace push``) and the fork server that runs the examples' commands."""
    from tests.support.langsmith_server import LangSmithRecorder

    root = tmp_path_factory.mktemp("docs-server")
    socket_path = root / "fork.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYMT_", "LANGSMITH_", "LANGCHAIN_"))}
    env.update(PYTHONPATH=str(REPO), HOME=str(root), MPLBACKEND="Agg")
    with LangSmithRecorder() as langsmith:
        # Its own process group: the commands it forks (a hung one included) end with it.
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.support.docs_shim", "--serve", str(socket_path)],
            cwd=root,
            env=env,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while not socket_path.exists():
                assert server.poll() is None, f"the docs fork server ended with status {server.returncode}"
                assert time.monotonic() < deadline, "the docs fork server did not start in 120 s"
                time.sleep(0.1)
            yield {"langsmith": langsmith.url, "fork_server": str(socket_path)}
        finally:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture(scope="module")
def pilot_db(tmp_path_factory: pytest.TempPathFactory, services: dict[str, str]) -> Path:
    """A database holding the README's first run, ``pilot``, played with the fake models."""
    root = tmp_path_factory.mktemp("pilot")
    (root / "home").mkdir()
    env = _environment(root, _shim_bin(root / "bin"), services)
    done = subprocess.run(
        ["python", "-m", "graph.run", "--mode", "implicit", "--run-id", "pilot"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return root / "dialogues.db"


def _commands(text: str) -> list[list[str]]:
    """The command lines of a shell block: continuations joined, comments and blank lines dropped."""
    joined = text.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        if words:
            commands.append(words)
    return commands


_HELP: dict[tuple[str, ...], str | None] = {}


def _help(argv: tuple[str, ...], env: dict[str, str], cwd: Path) -> str | None:
    """The --help text of ``python -m *argv`` (through the fork server), or None when it fails."""
    if argv not in _HELP:
        done = subprocess.run(
            ["python", "-m", *argv, "--help"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        _HELP[argv] = done.stdout if done.returncode == 0 else None
    return _HELP[argv]


def _flag_problems(module: str, args: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """What is wrong with ``python -m module args`` short of running it: a module without --help, an unknown flag.

    A flag counts as known when the module's help or the help of one of its subcommands named in ``args`` lists it.
    """
    main_help = _help((module,), env, cwd)
    if main_help is None:
        return [f"`python -m {module} --help` fails"]
    helps = [main_help] + [
        _help((module, word), env, cwd) or "" for word in dict.fromkeys(args) if re.fullmatch(r"[a-z][a-z0-9-]*", word)
    ]
    flags = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", " ".join(args))))
    unknown = [f for f in flags if not any(re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", h) for h in helps)]
    return [f"`python -m {module}` does not know {unknown} (no --help of it lists them)"] if unknown else []


def _help_checks(block: Block, env: dict[str, str], cwd: Path) -> list[str]:
    """For each ``python -m MODULE`` / ``dymt`` command of a block: its flags are checked, not run."""
    problems = []
    for words in _commands(block.text):
        if words[:2] == ["python", "-m"] and len(words) > 2:
            problems += _flag_problems(words[2], words[3:], env, cwd)
        elif words[0] == "dymt":
            problems += _flag_problems("cli.dymt", words[1:], env, cwd)
    return problems


def _run(block: Block, env: dict[str, str], cwd: Path, text: str) -> str | None:
    """Run one block (as ``text``); a message saying what failed, or None."""
    if block.language == "python":
        script = cwd / f"block_{block.line}.py"
        script.write_text(text, encoding="utf-8")
        argv = ["python", str(script)]
    else:
        prologue = "set -euo pipefail\ntrap 'echo \"docs-test: this command failed: $BASH_COMMAND\" >&2' ERR\n"
        argv = ["bash", "-c", prologue + text]
    appended: dict[str, list[str]] = {}
    for marker in block.marked("append"):
        module, *extra = shlex.split(marker.argument)
        appended.setdefault(module, []).extend(extra)
    if appended:
        env = env | {"DOCS_TEST_APPEND": json.dumps(appended)}
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return f"{block.where}: still running after {COMMAND_TIMEOUT} s"
    if done.returncode != 0:
        return (
            f"{block.where}: exit status {done.returncode}\n--- stdout\n{done.stdout[-2000:]}\n--- "
            f"stderr\n{done.stderr[-3000:]}"
        )
    return None


def _fresh_postgres(request: pytest.FixtureRequest) -> str | None:
    """A fresh database's URL on the test server (tests/conftest.py ``pg_url``), or None without a server."""
    if not os.environ.get(ENV_TEST_PG):
        return None
    return request.getfixturevalue("pg_url")


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_examples_run(
    path: Path, tmp_path: Path, pilot_db: Path, services: dict[str, str], request: pytest.FixtureRequest
) -> None:
    page_blocks = blocks(path)
    root = tmp_path
    cwd = root / "work"
    cwd.mkdir()
    (root / "home").mkdir()
    for folder in ("examples", "prompts"):
        shutil.copytree(REPO / folder, cwd / folder)
    shutil.copytree(REPO / "tests" / "fixtures", cwd / "tests" / "fixtures")
    fairmt = _fairmt_dir()
    if fairmt is not None:  # where the examples' relative paths look for it: ../shared/fairmt-bench
        (root / "shared").mkdir()
        (root / "shared" / "fairmt-bench").symlink_to(fairmt)
    for part in pilot_db.parent.glob("dialogues.db*"):  # the WAL too: it holds the last writes
        shutil.copyfile(part, root / part.name)
    env = _environment(root, _shim_bin(root / "bin"), services)

    failures, notes = [], []
    for block in page_blocks:
        if block.marked("skip"):
            notes.append(f"{block.where}: not run ({block.marked('skip')[0].reason})")
            continue
        text, help_only = block.text, bool(block.marked("help"))
        if not help_only and fairmt is None and ("fairmt-bench" in text or "paper.toml" in text):
            help_only = True
            notes.append(f"{block.where}: FairMT-Bench not found, flags checked only")
        for marker in block.marked("postgres"):
            if help_only:
                break
            url = _fresh_postgres(request)
            if url is None:
                help_only = True
                notes.append(f"{block.where}: no PostgreSQL test server ({ENV_TEST_PG}), flags checked only")
            else:
                text = text.replace(marker.argument, url)
        if help_only and block.language == "bash":
            failures += [f"{block.where}: {p}" for p in _help_checks(block, env, cwd)]
            continue
        failure = _run(block, env, cwd, text)
        if failure:
            failures.append(failure)
    print("\n".join(notes))
    assert not failures, "\n\n".join(failures)


def test_every_marker_is_read_and_gives_a_reason() -> None:
    for path in EXAMPLE_FILES:
        text = path.read_text(encoding="utf-8")
        lines = re.findall(r"^\s*<!--\s*docs-test.*?-->", text, re.M)
        read = [m for b in blocks(path) for m in b.markers]
        assert len(lines) == len(read), f"{path.name}: a docs-test marker not right above a ```bash or ```python block"
        assert all(m.reason for m in read), f"{path.name}: every marker says why"
        for block in blocks(path):
            for marker in block.marked("postgres"):
                assert marker.argument.startswith("postgresql://") and marker.argument in block.text, (
                    f"{block.where}: a postgres marker names the URL its block uses"
                )


PROSE_COMMAND = re.compile(r"`python -m ((?:graph|evals|benchmarks|cli)(?:\.[a-z_]+)*)((?: [^`]*)?)`")


@pytest.mark.slow
def test_commands_in_prose_name_real_modules_and_flags(services: dict[str, str], tmp_path: Path) -> None:
    """Inline `python -m ...` in the text (syntax summaries, not run): the module exists and knows every --flag."""
    (tmp_path / "home").mkdir()
    env = _environment(tmp_path, _shim_bin(tmp_path / "bin"), services)
    problems = []
    for path in EXAMPLE_FILES:
        for module, rest in sorted(set(PROSE_COMMAND.findall(path.read_text(encoding="utf-8")))):
            problems += [f"{path.relative_to(REPO)}: {p}" for p in _flag_problems(module, rest.split(), env, tmp_path)]
    assert not problems, "\n".join(problems)
