"""sync-code's commit index and the upstream-fix matcher, on real git repositories made here."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlmedic.errors import UserError
from rlmedic.knowledge.history import (
    FailureQuery, History, clean_body, match, pr_number, query_from_finding, symbol_of, sync_clone, sync_rest,
)
from tests.gitrepo import GitRepo

ACTOR_V1 = '''import torch


class DataParallelActor:
    def compute_loss(self, batch):
        return batch.mean()

    def update_policy(self, data):
        n = len(data) // self.micro_batch
        return sum(data) / n
'''
ACTOR_V2 = ACTOR_V1.replace("        return sum(data) / n\n", "        if n == 0:\n            return 0.0\n        return sum(data) / n\n")
ROLLOUT_V1 = '''def get_reward(sample):
    return sample["reward"]


def pad(x):
    return x
'''
ROLLOUT_V2 = ROLLOUT_V1.replace('    return sample["reward"]', '    return sample.get("reward", 0.0)')


def make_framework(root: Path) -> tuple[GitRepo, dict[str, str]]:
    """A miniature verl: v0.1.0, a fix in update_policy (#12) and a feature (#13) in v0.2.0, an unreleased fix (#15)."""
    repo = GitRepo(root / "verl", origin="https://github.com/example-org/verl.git")
    shas = {}
    shas["init"] = repo.commit("init (#1)", {"verl/workers/actor.py": ACTOR_V1, "verl/workers/rollout.py": ROLLOUT_V1,
                                             "README.md": "verl\n"})
    repo.tag("v0.1.0")
    shas["fix12"] = repo.commit("[actor] fix: avoid ZeroDivisionError in update_policy when the micro batch is empty (#12)",
                                {"verl/workers/actor.py": ACTOR_V2},
                                body="The micro batch count can be zero.\n\n### Checklist\n- [ ] error handling docs")
    shas["feat13"] = repo.commit("[utils] feat: add a tracking logger (#13)",
                                 {"verl/utils/tracking.py": "class Tracking:\n    def log(self, data):\n        pass\n"})
    repo.tag("v0.2.0", annotated=True)
    shas["fix15"] = repo.commit("[rollout] fix: missing reward key raises KeyError in get_reward (#15)",
                                {"verl/workers/rollout.py": ROLLOUT_V2})
    return repo, shas


FRAMES = [("/usr/lib/python3.10/site-packages/verl/trainer/main.py", 10, "fit"),
          ("/usr/lib/python3.10/site-packages/verl/workers/actor.py", 12, "update_policy")]


@pytest.fixture()
def framework(tmp_path: Path):
    return make_framework(tmp_path)


def test_sync_reads_commits_prs_functions_files_and_releases(framework, tmp_path: Path) -> None:
    repo, shas = framework
    with History(tmp_path / "index" / "history.sqlite") as h:
        report = sync_clone(h, repo.path)
        assert report.repo == "example-org/verl"
        assert (report.new_commits, report.tags) == (4, 2)
        fix = h.commit("example-org/verl", shas["fix12"])
        assert fix["pr"] == 12 and fix["release"] == "v0.2.0"
        assert "update_policy" in fix["symbols"] and fix["files"] == ["verl/workers/actor.py"]
        assert "Checklist" not in fix["body"] and "micro batch count" in fix["body"]
        assert h.commit("example-org/verl", shas["init"])["release"] == "v0.1.0"
        assert h.commit("example-org/verl", shas["fix15"])["release"] == ""
        assert "get_reward" in h.commit("example-org/verl", shas["fix15"])["symbols"]
        assert {"Tracking", "log"} <= set(h.commit("example-org/verl", shas["feat13"])["symbols"])


def test_resync_is_incremental_and_picks_up_new_tags(framework, tmp_path: Path) -> None:
    repo, shas = framework
    with History(tmp_path / "h.sqlite") as h:
        sync_clone(h, repo.path)
        started = time.monotonic()
        again = sync_clone(h, repo.path)
        assert again.new_commits == 0 and again.new_tags == 0 and time.monotonic() - started < 5
        sha = repo.commit("[rollout] fix: pad handles None (#16)", {"verl/workers/rollout.py": ROLLOUT_V2 + "\n# pad\n"})
        repo.tag("v0.3.0")
        third = sync_clone(h, repo.path)
        assert (third.new_commits, third.new_tags, third.total_commits) == (1, 1, 5)
        assert h.commit("example-org/verl", shas["fix15"])["release"] == "v0.3.0"
        assert h.commit("example-org/verl", sha)["release"] == "v0.3.0"
        assert h.commit("example-org/verl", shas["fix12"])["release"] == "v0.2.0"  # the first release stays


def test_bare_clone_and_name_override(framework, tmp_path: Path) -> None:
    repo, shas = framework
    bare = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.path), str(bare)], check=True)
    with History(tmp_path / "h.sqlite") as h:
        report = sync_clone(h, bare, name="verl-project/verl")
        assert report.new_commits == 4
        assert h.commit("verl-project/verl", shas["fix12"])["release"] == "v0.2.0"


def test_not_a_clone_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with History(tmp_path / "h.sqlite") as h:
        with pytest.raises(UserError, match="not a git clone"):
            sync_clone(h, tmp_path / "plain")
        with pytest.raises(UserError, match="no such folder"):
            sync_clone(h, tmp_path / "missing")


def test_match_names_the_fix_after_the_users_release(framework, tmp_path: Path) -> None:
    repo, shas = framework
    with History(tmp_path / "h.sqlite") as h:
        sync_clone(h, repo.path)
        query = FailureQuery("ZeroDivisionError", "integer division or modulo by zero", FRAMES)
        fixes = match(h, query, versions={"verl": "0.1.0"})
        best = fixes[0]
        assert (best.pr, best.release, best.status, best.strong) == (12, "v0.2.0", "after_yours", True)
        assert best.matched.startswith("function verl/workers/actor.py:update_policy")
        assert best.ref == "example-org/verl#12" and best.url.endswith("/pull/12")
        # the user already runs the release with that fix: it comes first, marked in_yours
        fixed = match(h, query, versions={"verl": "0.2.0"})
        assert fixed[0].pr == 12 and fixed[0].status == "in_yours"
        # without a version nothing can be said about it
        assert match(h, query)[0].status == "unknown"


def test_match_by_file_and_words_and_no_tie_is_nothing(framework, tmp_path: Path) -> None:
    repo, shas = framework
    with History(tmp_path / "h.sqlite") as h:
        sync_clone(h, repo.path)
        # another function of rollout.py, the error names the reward key: the unreleased fix #15 is found
        query = FailureQuery("KeyError", "'reward'", [("/x/site-packages/verl/workers/rollout.py", 2, "get_reward")])
        best = match(h, query, versions={"verl": "0.2.0"})[0]
        assert best.pr == 15 and best.release == "" and best.status == "after_yours"
        # a frame in another package and words no commit has: nothing
        other = FailureQuery("RuntimeError", "CUDA driver mismatch", [("/x/site-packages/torch/nn/functional.py", 3, "linear")])
        assert match(h, other) == []


def test_query_from_a_findings_evidence() -> None:
    query = query_from_finding({"exception": "KeyError", "message": "'reward'",
                                "frames": ["/a/site-packages/verl/workers/rollout.py:2 in get_reward"]})
    assert query.frames == [("/a/site-packages/verl/workers/rollout.py", 2, "get_reward")]
    assert query_from_finding({"line_text": "no traceback"}) is None


def test_small_parsers() -> None:
    assert pr_number("[actor] fix: x (#123)") == 123
    assert pr_number("Merge pull request #77 from a/b") == 77
    assert pr_number("fix: no number") is None
    assert symbol_of("    def update_policy(self, data):") == "update_policy"
    assert symbol_of("class Actor(Base):") == "Actor"
    assert symbol_of("static void launch_kernel(int n)") == "launch_kernel"
    assert clean_body("Why.\n- [x] done\n> template\n### Test\nall of it") == "Why."


def test_rest_sync_from_a_fake_github(tmp_path: Path) -> None:
    from rlmedic.knowledge.github import GitHubClient
    from tests.fake_github import FakeGitHub, FakeGitHubServer

    fake = FakeGitHub(page_size=2)
    repo = "example-org/verl"
    fake.add_commit(repo, "a" * 40, "init (#1)", "2025-03-01T12:00:00Z", {"verl/workers/actor.py": "@@ -0,0 +1,3 @@\n+def update_policy(self):\n+    pass"})
    fake.add_commit(repo, "b" * 40, "[actor] fix: guard empty batch in update_policy (#12)\n\nWhy.", "2025-03-02T12:00:00Z",
                    {"verl/workers/actor.py": "@@ -2 +2,2 @@ def update_policy(self):\n-    pass\n+    if n == 0:"})
    fake.add_commit(repo, "c" * 40, "[rollout] fix: KeyError in get_reward (#15)", "2025-03-04T12:00:00Z",
                    {"verl/workers/rollout.py": "@@ -1 +1 @@ def get_reward(s):\n-x\n+y"})
    fake.tags[repo] = [{"name": "v0.1.0", "commit": {"sha": "a" * 40}}, {"name": "v0.2.0", "commit": {"sha": "b" * 40}}]
    with FakeGitHubServer(fake), GitHubClient(fake.url) as client, History(tmp_path / "h.sqlite") as h:
        report = sync_rest(h, client, repo)
        assert report.new_commits == 3 and report.tags == 2
        fix = h.commit(repo, "b" * 40)
        assert fix["pr"] == 12 and fix["release"] == "v0.2.0" and "update_policy" in fix["symbols"]
        assert h.commit(repo, "c" * 40)["release"] == ""
        # nothing new: the commit list is read once more (a 304 when unchanged), no commit is fetched again
        before = len(fake.requests_to(r"/commits/"))
        again = sync_rest(h, client, repo)
        assert again.new_commits == 0 and len(fake.requests_to(r"/commits/")) == before
        best = match(h, FailureQuery("ZeroDivisionError", "division by zero", FRAMES), versions={"verl": "0.1.0"})[0]
        assert best.pr == 12 and best.status == "after_yours"


def test_real_cases_file_is_facts_with_a_fixed_split() -> None:
    """tests/data/upstream_cases.jsonl: real fix commits with their traceback lines; the split is a hash of the sha."""
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from upstream_cases import split_of

    path = Path(__file__).resolve().parent / "data" / "upstream_cases.jsonl"
    cases = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(cases) >= 40
    for c in cases:
        assert set(c) >= {"id", "repo", "pr", "commit", "version", "package", "traceback", "split", "source"}
        assert len(c["commit"]) == 40 and c["traceback"] and c["split"] == split_of(c["commit"])
        assert "Error" in c["traceback"][-1] or "Exception" in c["traceback"][-1]
    heldout = sum(c["split"] == "heldout" for c in cases)
    assert 0.1 <= heldout / len(cases) <= 0.35


def test_benchmark_skips_in_one_line_without_a_mirror(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "upstream.py"
    out = subprocess.run([sys.executable, str(script), f"verl-project/verl={tmp_path / 'absent'}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines()[0].startswith("skipped verl-project/verl")
