"""`pallas validate` as a user runs it: files, directories and stdin, exit codes, plain pipes."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.invalid_manifests import INVALID, PASSWORD
from tests.support.operator import agent, at, deployment, spec

REPO = Path(__file__).resolve().parents[3]


def _validate(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pallas_runtime.cli", "validate", *args],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_example_is_valid() -> None:
    result = _validate("-f", str(REPO / "examples"))
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    assert result.stderr.strip().endswith("15 objects valid")


def test_the_workflow_example_is_valid() -> None:
    result = _validate("-f", str(REPO / "examples" / "workflow.yaml"))
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    assert result.stderr.strip().endswith("8 objects valid")


def test_every_manifest_the_api_server_refuses_is_reported_with_its_line(tmp_path: Path) -> None:
    """All shared cases in one file, each in a namespace of its own beside a valid deployment."""
    docs, lines = [], {}
    for case in INVALID:
        manifest = copy.deepcopy(case.manifest)
        at("metadata.namespace", case.id)(manifest)
        if manifest["kind"] == "PallasAgent":
            docs.append(deployment("ouranos", at("metadata.namespace", case.id)))
        docs.append(manifest)
        lines[case.id] = (len(docs), manifest)
    text = "".join("---\n" + yaml.safe_dump(doc) for doc in docs)
    path = tmp_path / "invalid.yaml"
    path.write_text(text)
    starts = [n for n, line in enumerate(text.splitlines(), start=1) if line == "---"]

    result = _validate("-f", str(path))
    assert result.returncode == 1, result.stderr
    out = result.stdout.splitlines()
    for case in INVALID:
        index, manifest = lines[case.id]
        prefix = f"{path}:{starts[index - 1] + 1}: {manifest['kind']}/{manifest['metadata']['name']}: "
        mine = [line for line in out if line.startswith(prefix)]
        assert any(all(text in line for text in case.reported_as) for line in mine), (case.id, mine)
    assert len(out) == len(INVALID), "one line per problem, none about the valid deployments"
    assert result.stderr.strip().endswith(f"{len(INVALID)} problems in {len(docs)} objects")


def test_stdin_and_repeated_files_are_read_together(tmp_path: Path) -> None:
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(deployment()))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}
    stdin = yaml.safe_dump_all([agent("boss", spec(agents=["research"])), service])
    result = _validate("-f", str(tmp_path / "deployment.yaml"), "-f", "-", stdin=stdin)
    assert result.returncode == 1
    assert result.stdout == (
        "<stdin>:1: PallasAgent/boss: spec.agents/dependsOn: PallasAgents not found in namespace "
        "'default' of the files: research\n"
    )
    service_line = stdin.splitlines().index("---") + 2  # the line after the separator
    assert f"<stdin>:{service_line}: Service/web: not a Pallas kind, not checked" in result.stderr


def test_credentials_in_urls_are_reported_per_field_without_repeating_the_password() -> None:
    docs = []
    for case in INVALID:
        if case.id.startswith("credentials-in-"):
            docs.append(copy.deepcopy(case.manifest))
            at("metadata.namespace", case.id)(docs[-1])
            if docs[-1]["kind"] == "PallasAgent":
                docs.append(deployment("ouranos", at("metadata.namespace", case.id)))
    result = _validate("-f", "-", stdin=yaml.safe_dump_all(docs))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 7
    assert all("must not carry credentials (user:password@host): " in line for line in lines), lines
    assert (
        "spec.mcpServers.argos.url: must not carry credentials (user:password@host): put them in a "
        in lines[0]
    )
    assert PASSWORD not in result.stdout + result.stderr


def test_bad_yaml_and_unreadable_files_are_usage_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: [Service\nmetadata: {}\n")
    result = _validate("-f", str(bad))
    assert result.returncode == 2
    assert result.stderr.startswith(f"pallas validate: {bad}:3: not valid YAML: "), result.stderr
    result = _validate("-f", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2
    assert "missing.yaml: cannot read (No such file or directory)" in result.stderr
    assert _validate().returncode == 2  # -f is required
