"""The publishing workflow cannot run here, so this checks what it would do: it parses, runs the
README's test command before anything else, uploads the built site, and deploys only from main with
no secrets beyond the default token; and the site it publishes has canonical URLs and edit links."""

from __future__ import annotations

import pytest
import yaml

from docexec.fences import REPO

pytestmark = pytest.mark.fast  # the test tier: see the testing page

WORKFLOW = REPO / ".github/workflows/pages.yml"


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def steps(job: dict) -> list[dict]:
    return job["steps"]


def test_the_workflow_tests_then_uploads_the_site():
    jobs = workflow()["jobs"]
    runs = [s.get("run", "") for s in steps(jobs["test"])]
    assert any("make test" in r for r in runs), runs
    upload = [s for s in steps(jobs["test"]) if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert len(upload) == 1 and upload[0]["with"]["path"].rstrip("/") == "site"
    # What is uploaded is the site the tests built and checked, not a second build.
    test_step = next(s for s in steps(jobs["test"]) if "make test" in s.get("run", ""))
    assert test_step["env"]["DISTDOCS_SITE_DIR"].rstrip("/") == "site" and not any("make build" in r for r in runs)
    # The upload comes after the tests: a failing test publishes nothing.
    names = [s.get("run", s.get("uses", "")) for s in steps(jobs["test"])]
    assert names.index(upload[0]["uses"]) > next(i for i, r in enumerate(names) if "make test" in r)


def test_the_workflow_deploys_only_from_main_with_the_default_token():
    flow = workflow()
    deploy = flow["jobs"]["deploy"]
    assert deploy["needs"] == "test" and "refs/heads/main" in deploy["if"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert flow["permissions"] == {"contents": "read"}
    assert "secrets." not in WORKFLOW.read_text()
    assert [s["uses"].split("@")[0] for s in steps(deploy)] == ["actions/deploy-pages"]


def test_the_readme_test_command_is_what_the_workflow_runs():
    readme = (REPO / "README.md").read_text()
    assert "make test" in readme
    assert "make test" in (REPO / ".ci/run").read_text()


def test_mkdocs_names_the_published_site_and_its_sources():
    text = (REPO / "mkdocs.yml").read_text()
    for key in ("site_url: https://", "repo_url: https://", "edit_uri: edit/main/docs/"):
        assert key in text, key
