"""docs/operations.md stays in step with what it documents: every metric harnessx exports is
listed (and nothing else), its internal links resolve, and the timings it quotes are the
ones in the shipped units and manifests."""

from __future__ import annotations

import re

from deploy_support import DEPLOY, DOCS, exported_metrics, github_anchor, load_yaml_all, metric_names_in

from harnessx.store._migrations import expected_objects

DOC = DOCS / "operations.md"
SECTIONS = (
    "Deploying on one host with systemd",
    "Deploying on Kubernetes",
    "Sizing the lease and drain timeouts",
    "Upgrading without losing runs",
    "Alerts",
    "Metrics",
    "Logs",
)


def text() -> str:
    return DOC.read_text(encoding="utf-8")


def headings() -> list[str]:
    return re.findall(r"^#{1,6} (.+)$", text(), re.MULTILINE)


def test_sections_exist() -> None:
    assert set(SECTIONS) <= set(headings())


def test_internal_links_resolve() -> None:
    anchors = {github_anchor(h) for h in headings()}
    links = re.findall(r"\]\(#([^)]+)\)", text())
    assert links
    assert set(links) <= anchors


def test_units_point_at_existing_sections() -> None:
    titles = set(headings())
    for unit in (DEPLOY / "systemd").iterdir():
        for title in re.findall(r'docs/operations\.md \("([^"]+)"\)', unit.read_text(encoding="utf-8")):
            assert title in titles, (unit.name, title)


def test_metric_table_lists_every_exported_metric() -> None:
    listed = set(re.findall(r"^\| `(harnessx_[a-z0-9_]+)`", text(), re.MULTILINE))
    exported = exported_metrics()
    # Histograms are listed by their base name.
    expected = {name.removesuffix("_bucket") for name in exported if not name.endswith(("_sum", "_count"))}
    assert listed == expected
    # The SQL functions of the schema are named harnessx_* too (the doc quotes statements).
    functions = expected_objects("postgres")
    mentioned = metric_names_in(text()) - functions
    unknown = {name for name in mentioned if name not in exported and name not in expected}
    assert unknown == set(), "the doc names metrics harnessx does not export"


def test_quoted_timings_match_the_shipped_files() -> None:
    doc = text()
    worker_unit = (DEPLOY / "systemd" / "harness-worker@.service").read_text(encoding="utf-8")
    for key in ("WatchdogSec", "TimeoutStopSec"):
        (value,) = re.findall(rf"^{key}=(\d+)s$", worker_unit, re.MULTILINE)
        assert re.search(rf"`{key}`[^|]*\| {value} s \|", doc) or f"{key}={value}s" in doc, key
    (deployment,) = load_yaml_all(DEPLOY / "kubernetes" / "worker-deployment.yaml")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert re.search(rf"`terminationGracePeriodSeconds` \| {grace} s \|", doc)
    (config,) = load_yaml_all(DEPLOY / "kubernetes" / "configmap.yaml")
    assert re.search(rf"`HARNESSX_LEASE_SECONDS` \| {config['data']['HARNESSX_LEASE_SECONDS']} s \|", doc)
    assert re.search(rf"`HARNESSX_DRAIN_TIMEOUT` \| {config['data']['HARNESSX_DRAIN_TIMEOUT']} s \|", doc)
