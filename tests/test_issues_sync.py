"""sync-issues against a fake GitHub REST API on loopback: pagination, ETags, rate limits, retries,
the thread filter, incremental re-sync, export/import and redaction."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fake_github import FakeGitHub, FakeGitHubServer
from typer.testing import CliRunner

from rlmedic.errors import UserError
from rlmedic.knowledge.embeddings import Embedder
from rlmedic.knowledge.github import EtagCache, GitHubClient, parse_link_next
from rlmedic.knowledge.index import KnowledgeBase
from rlmedic.ui.cli import app

REPO = "acme/trainer"
SECRET = "ghp_" + "Zx9" * 12  # a GitHub token pasted into an issue
HF_SECRET = "hf_" + "Qw7" * 10
ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"


def comment(author: str, association: str, body: str, when: str = "2025-01-05T00:00:00Z") -> dict:
    return {
        "event": "commented",
        "user": {"login": author},
        "actor": {"login": author},
        "author_association": association,
        "created_at": when,
        "body": body,
        "reactions": {},
    }


def merged_pr(number: int, merged_at: str, title: str, repo: str = REPO) -> dict:
    return {
        "event": "cross-referenced",
        "created_at": merged_at,
        "source": {
            "type": "issue",
            "issue": {
                "number": number,
                "title": title,
                "html_url": f"https://github.com/{repo}/pull/{number}",
                "repository": {"full_name": repo},
                "pull_request": {"html_url": f"https://github.com/{repo}/pull/{number}", "merged_at": merged_at},
            },
        },
    }


def populate(fake: FakeGitHub) -> None:
    """Five closed issues (three teach something), one pull request, one open issue."""
    fake.add_issue(
        REPO,
        1,
        title="Illegal memory access during rollout",
        body=f"Training crashes after step 3.\n```\n[rank0]: Traceback (most recent call last):\n[rank0]:   File \"x.py\"\n[rank0]: {ILLEGAL}\n```\nAny idea?",
        timeline=[
            comment("reporter1", "NONE", "still happening on main"),
            comment("dev", "MEMBER", "A race in the weight update stream; fixed by #10."),
            merged_pr(10, "2025-02-02T00:00:00Z", "Synchronise the weight update stream"),
            {"event": "closed", "commit_id": "abc123def4567890", "created_at": "2025-02-02T00:00:00Z"},
        ],
    )
    fake.add_issue(
        REPO,
        2,
        title="How to set the rollout batch size?",
        state_reason="not_planned",
        body="Which flag sets it?",
        timeline=[comment("lead", "OWNER", "Use --rollout-batch-size; the old name was removed.")],
    )
    fake.add_issue(REPO, 3, title="Stale question", state_reason="not_planned", body="hello?", timeline=[comment("reporter3", "NONE", "bump")])
    fake.add_issue(
        REPO, 4, title="Duplicate of 1", state_reason="duplicate", body="same", timeline=[comment("someone", "CONTRIBUTOR", "dup of #1")]
    )
    fake.add_issue(
        REPO,
        5,
        title="wandb login fails in the container",
        body=f"I run with GITHUB_TOKEN={SECRET} and HF token {HF_SECRET}\nerror: wandb.errors.CommError: permission denied",
        timeline=[
            comment("helper", "CONTRIBUTOR", "Mount ~/.netrc read-only and set WANDB_MODE=offline for the first run."),
            comment("reporter5", "NONE", "That worked, thanks!"),
        ],
    )
    fake.add_issue(REPO, 6, title="Fix docs", pull_request={"url": "x"})  # a PR: not a thread
    fake.add_issue(REPO, 7, title="Open question", state="open", state_reason=None)
    fake.releases[REPO] = [
        {"tag_name": "v0.4.1", "published_at": "2025-02-10T00:00:00Z", "draft": False, "prerelease": False, "body": "- Synchronise the weight update stream (#10)"},
        {"tag_name": "v0.4.0", "published_at": "2025-01-10T00:00:00Z", "draft": False, "prerelease": False, "body": "first"},
    ]


@pytest.fixture
def github():
    fake = FakeGitHub(page_size=2)
    populate(fake)
    with FakeGitHubServer(fake) as running:
        yield running


def sync(github: FakeGitHub, index: Path, *extra: str) -> dict:
    result = CliRunner().invoke(app, ["sync-issues", REPO, "--api-url", github.url, "--index-dir", str(index), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_link_header_parsing() -> None:
    header = '<https://api.github.com/x?page=2>; rel="next", <https://api.github.com/x?page=9>; rel="last"'
    assert parse_link_next(header) == "https://api.github.com/x?page=2"
    assert parse_link_next('<https://api.github.com/x?page=1>; rel="first"') is None
    assert parse_link_next(None) is None


def test_sync_follows_link_pages_and_keeps_only_threads_that_teach(github: FakeGitHub, tmp_path: Path) -> None:
    report = sync(github, tmp_path / "index")
    assert report["listed"] == 5 and report["pull_requests"] == 1
    assert report["kept"] == 3 and sum(report["skipped"].values()) == 2
    assert report["added"] == 3 and report["embedded"] == 3
    pages = github.requests_to(r"/issues$")
    assert [r.query.get("page", "1") for r in pages] == ["1", "2", "3"]  # 6 closed items, 2 a page, via Link
    assert all(r.query["state"] == "closed" for r in pages)
    timelines = github.requests_to(r"/timeline$")
    assert len({r.path for r in timelines}) == 5
    assert len(timelines) == 6  # issue 1 has four events: two timeline pages
    kb = KnowledgeBase(tmp_path / "index")
    assert sorted(kb.issues.manifest.files) == [f"issue:{REPO}#1", f"issue:{REPO}#2", f"issue:{REPO}#5"]
    hit = kb.search(ILLEGAL, 1, kind="issue")[0]
    assert hit.source == f"{REPO}#1" and hit.url == f"https://github.com/{REPO}/issues/1"
    assert hit.info["fixed_in"] == "v0.4.1" and hit.info["fixed_in_basis"] == "release notes"
    assert f"{REPO}#10" in hit.info["fix"] and hit.citation.kind == "issue"
    # the opening post's log is trimmed to its error line
    assert "Traceback" not in hit.text and ILLEGAL in hit.text


def test_resync_without_changes_makes_only_conditional_requests_and_embeds_nothing(
    github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync(github, tmp_path / "index")
    before = len(github.log)
    calls: list[int] = []
    real_embed = Embedder.embed
    monkeypatch.setattr(Embedder, "embed", lambda self, texts, **kw: calls.append(len(texts)) or real_embed(self, texts, **kw))
    report = sync(github, tmp_path / "index")
    again = github.log[before:]
    assert report["embedded"] == 0 and report["unchanged"] == 3 and report["added"] == report["updated"] == 0
    assert again and all(r.conditional and r.status == 304 for r in again), again
    assert not [r for r in again if r.path.endswith("/timeline")]  # unchanged issues: no timeline request at all
    assert report["http"]["not_modified"] == len(again)
    assert calls == []

    # one issue gains a maintainer answer: only that thread is read again and re-embedded
    issue = next(i for i in github.issues[REPO] if i["number"] == 3)
    issue["updated_at"] = "2025-03-01T00:00:00Z"
    github.timelines[(REPO, 3)].append(comment("lead", "OWNER", "Fixed in v0.4.1, please upgrade."))
    before = len(github.log)
    report = sync(github, tmp_path / "index")
    assert report["added"] == 1 and report["embedded"] == 1 and report["unchanged"] == 3
    assert [r.path for r in github.log[before:] if r.path.endswith("/timeline")] == [f"/repos/{REPO}/issues/3/timeline"]
    hit = KnowledgeBase(tmp_path / "index").search("Stale question", 1, kind="issue")[0]
    assert hit.source == f"{REPO}#3" and hit.info["fixed_in"] == "v0.4.1" and hit.info["fixed_in_basis"] == "maintainer reply"


def test_rate_limit_waits_for_the_reset_and_says_so(github: FakeGitHub, tmp_path: Path) -> None:
    reset = int(time.time()) + 1
    github.fail(r"/issues$", 403, {"x-ratelimit-remaining": "0", "x-ratelimit-limit": "60", "x-ratelimit-reset": str(reset)})
    github.fail(r"/timeline$", 429, {"retry-after": "1"})
    notices: list[str] = []
    from rlmedic.knowledge.sync import SyncReport, fetch_threads

    report = SyncReport()
    with GitHubClient(github.url, cache=EtagCache(), max_wait=5, on_wait=notices.append) as client:
        records = list(fetch_threads(client, REPO, report))
    assert len(records) == 3
    assert len(notices) == 2
    assert "rate limit (60 requests an hour) reached: waiting" in notices[0] and "--token-env" in notices[0]
    assert "secondary rate limit" in notices[1]
    assert client.stats.waited_s >= 1


def test_rate_limit_longer_than_max_wait_stops_with_one_clear_line(github: FakeGitHub, tmp_path: Path) -> None:
    github.fail(r"/issues$", 403, {"x-ratelimit-remaining": "0", "x-ratelimit-limit": "60", "x-ratelimit-reset": str(int(time.time()) + 3600)})
    result = CliRunner().invoke(
        app, ["sync-issues", REPO, "--api-url", github.url, "--index-dir", str(tmp_path / "i"), "--max-wait", "2"]
    )
    assert result.exit_code == 2
    assert "rate limit" in result.output and "resets at" in result.output and "Re-run then" in result.output
    assert "Traceback" not in result.output
    assert len(github.log) == 1  # no retry storm


def test_server_errors_are_retried_with_backoff(github: FakeGitHub) -> None:
    github.fail(r"/timeline$", 502, times=2)
    github.fail(r"/releases$", 503)
    from rlmedic.knowledge.sync import SyncReport, fetch_threads

    notices: list[str] = []
    with GitHubClient(github.url, backoff=0.01, on_wait=notices.append) as client:
        records = list(fetch_threads(client, REPO, SyncReport()))
    assert len(records) == 3 and client.stats.retries == 3
    assert sum("server error 502" in n for n in notices) == 2
    # persistent failures end with a message, not a traceback
    github.fail(r"/releases$", 500, times=5)
    with GitHubClient(github.url, backoff=0.001, retries=2) as client, pytest.raises(UserError, match="500 3 times"):
        list(fetch_threads(client, REPO, SyncReport()))


def test_token_goes_in_the_header_from_the_named_variable(github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_GH", "tok-123")
    sync(github, tmp_path / "index", "--token-env", "MY_GH", "--max", "1")
    assert github.log and all(r.authorization == "Bearer tok-123" for r in github.log)
    assert len(github.requests_to(r"/timeline$")) == 1  # --max 1: one issue read


def test_export_then_import_round_trip_without_network(github: FakeGitHub, tmp_path: Path) -> None:
    out = tmp_path / "threads.jsonl"
    report = sync(github, tmp_path / "connected", "--export", str(out))
    assert report["exported"] == 3 and report["embedded"] == 0
    assert not KnowledgeBase(tmp_path / "connected").has_issues()  # export only: nothing indexed there
    lines = out.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["number"] for r in records] == [5, 1, 2] or sorted(r["number"] for r in records) == [1, 2, 5]
    assert all(r["format"] == "rlmedic-issue-thread/1" for r in records)
    first = next(r for r in records if r["number"] == 1)
    assert first["fix_prs"][0]["number"] == 10 and first["fixed_in"] == "v0.4.1" and ILLEGAL in first["error_lines"][0]

    requests = len(github.log)
    result = CliRunner().invoke(app, ["sync-issues", "--from-export", str(out), "--index-dir", str(tmp_path / "airgap"), "--json"])
    assert result.exit_code == 0, result.output
    imported = json.loads(result.stdout)
    assert imported["added"] == 3 and imported["kept"] == 3 and imported["repos"] == [REPO]
    assert len(github.log) == requests  # no request made
    hit = KnowledgeBase(tmp_path / "airgap").search(ILLEGAL, 1, kind="issue")[0]
    assert hit.source == f"{REPO}#1" and hit.matched_error

    # exporting onto an existing file and mixing the two modes are refused clearly
    again = CliRunner().invoke(app, ["sync-issues", REPO, "--api-url", github.url, "--export", str(out)])
    assert again.exit_code == 2 and "already exists" in again.output
    mixed = CliRunner().invoke(app, ["sync-issues", "--from-export", str(out), "--export", str(tmp_path / "x.jsonl")])
    assert mixed.exit_code == 2 and "do not go together" in mixed.output


def test_a_secret_in_a_thread_never_reaches_the_disk(github: FakeGitHub, tmp_path: Path) -> None:
    index = tmp_path / "index"
    sync(github, index)
    out = tmp_path / "threads.jsonl"
    sync(github, tmp_path / "other", "--export", str(out))
    files = [p for p in index.rglob("*") if p.is_file()] + [out]
    assert len(files) > 3
    for path in files:
        data = path.read_bytes()
        assert SECRET.encode() not in data and HF_SECRET.encode() not in data, path
    assert "[REDACTED]" in out.read_text()
    # the thread itself is kept, with its confirmed workaround
    hit = KnowledgeBase(index).search("wandb login fails in the container", 1, kind="issue")[0]
    assert hit.source == f"{REPO}#5" and "WANDB_MODE=offline" in hit.text


def test_bad_input_is_one_line(github: FakeGitHub, tmp_path: Path) -> None:
    runner = CliRunner()
    cases = [
        (["sync-issues", "not-a-repo", "--api-url", github.url], "expected OWNER/REPO"),
        (["sync-issues", REPO, "--api-url", github.url, "--since", "yesterday"], "--since"),
        (["sync-issues", "acme/missing", "--api-url", github.url], "not found"),
        (["sync-issues", REPO, "--api-url", "ftp://x"], "not an http(s) URL"),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "rlmedic-issue-thread/1", "repo": "a/b"}\n{not json\n')
    cases.append((["sync-issues", "--from-export", str(bad)], "bad.jsonl:1: field 'number'"))
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output, (args, result.output)


def test_client_refuses_the_internet_under_pytest() -> None:
    with pytest.raises(UserError, match="loopback"):
        GitHubClient("https://api.github.com")
    with pytest.raises(UserError, match="loopback"):
        GitHubClient("http://10.0.0.1:8080")


def test_search_kind_issue_from_the_cli(github: FakeGitHub, tmp_path: Path) -> None:
    runner = CliRunner()
    empty = runner.invoke(app, ["search", "anything", "--kind", "issue", "--index-dir", str(tmp_path / "index")])
    assert empty.exit_code == 2 and "sync-issues" in empty.output
    sync(github, tmp_path / "index")
    result = runner.invoke(app, ["search", "rollout batch size flag", "--kind", "issue", "--index-dir", str(tmp_path / "index")])
    assert result.exit_code == 0, result.output
    assert f"{REPO}#2" in result.output and f"https://github.com/{REPO}/issues/2" in result.output
    data = json.loads(runner.invoke(app, ["search", ILLEGAL, "--kind", "issue", "--json", "--index-dir", str(tmp_path / "index")]).stdout)
    top = data["results"][0]
    assert top["kind"] == "issue" and top["url"].endswith("/issues/1") and top["fixed_in"] == "v0.4.1"


def test_a_name_that_does_not_resolve_is_one_clear_error_at_once() -> None:
    """No network: a DNS failure is not retried 4 times (22 s) before its error; other connection
    errors still are."""
    import socket

    import httpx

    from rlmedic.knowledge.github import GitHubClient, unresolvable

    calls: list[str] = []

    def no_dns(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        try:
            raise socket.gaierror(-2, "Name or service not known")
        except socket.gaierror as exc:
            raise httpx.ConnectError("[Errno -2] Name or service not known", request=request) from exc

    waits: list[float] = []
    client = GitHubClient("http://127.0.0.1:9", transport=httpx.MockTransport(no_dns), sleep=waits.append)
    with pytest.raises(UserError, match="does not resolve"):
        client.get(client.url("repos/o/r/issues"))
    assert len(calls) == 1 and waits == []

    refused: list[str] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        refused.append(str(request.url))
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    client = GitHubClient("http://127.0.0.1:9", transport=httpx.MockTransport(refuse), sleep=waits.append, retries=2)
    with pytest.raises(UserError, match="cannot reach"):
        client.get(client.url("repos/o/r/issues"))
    assert len(refused) == 3 and len(waits) == 2
    assert not unresolvable(httpx.ConnectError("[Errno 111] Connection refused"))


# -- a hostile server (issue 31) ------------------------------------------------------------
def hostile(behaviour: str, path: str = r"/issues$") -> FakeGitHub:
    fake = FakeGitHub(page_size=2)
    populate(fake)
    fake.hostile[path] = behaviour
    return fake


def test_a_looping_or_endless_next_link_stops(tmp_path: Path) -> None:
    with FakeGitHubServer(hostile("loop")) as github:
        notices: list[str] = []
        with GitHubClient(github.url, on_wait=notices.append) as client:
            pages = list(client.paginate(client.url(f"repos/{REPO}/issues", {"state": "closed"})))
        assert len(pages) == 2 and any("loops back" in n for n in notices)
        for extra in ([], ["--max", "5"]):
            result = CliRunner().invoke(app, ["sync-issues", REPO, "--api-url", github.url, "--index-dir",
                                              str(tmp_path / "i"), "--export", str(tmp_path / f"x{len(extra)}.jsonl"),
                                              *extra])
            assert result.exit_code == 0 and "loops back" in result.output, result.output
    from rlmedic.knowledge.sync import SyncReport, fetch_threads

    with FakeGitHubServer(hostile("loop", r"/timeline$")) as github, GitHubClient(github.url) as client:
        assert len(list(fetch_threads(client, REPO, SyncReport()))) == 3
    assert len(github.requests_to(r"/issues/1/timeline$")) == 2  # pages 1 and 2, then the link back ends it
    with FakeGitHubServer(hostile("empty_forever")) as github, GitHubClient(github.url) as client:
        assert [body for body, _ in client.paginate(client.url(f"repos/{REPO}/issues"))] == [[]]
    assert len(github.requests_to(r"/issues$")) == 1


def test_a_trickling_body_hits_the_whole_request_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = hostile("trickle")
    fake.trickle_s = 0.05  # each read is quick: only a deadline on the whole request stops it
    with FakeGitHubServer(fake) as github:
        with GitHubClient(github.url, deadline=0.5) as client:
            start = time.monotonic()
            with pytest.raises(UserError, match=r"did not finish answering within 0.5 s"):
                client.get(client.url(f"repos/{REPO}/issues", {"state": "closed"}))
            assert time.monotonic() - start < 1.5
        monkeypatch.setenv("RLMEDIC_GITHUB_DEADLINE_S", "0.5")
        start = time.monotonic()
        result = CliRunner().invoke(app, ["sync-issues", REPO, "--api-url", github.url, "--index-dir", str(tmp_path / "i")])
        assert result.exit_code == 2 and "within 0.5 s" in result.output and time.monotonic() - start < 3
        monkeypatch.setenv("RLMEDIC_GITHUB_DEADLINE_S", "soon")
        result = CliRunner().invoke(app, ["sync-issues", REPO, "--api-url", github.url, "--index-dir", str(tmp_path / "i")])
        assert result.exit_code == 2 and "RLMEDIC_GITHUB_DEADLINE_S" in result.output


def test_a_trickle_is_refused_as_a_stall_long_before_the_deadline() -> None:
    """Issue 31's body of one byte every few seconds: past the stall time, under 8 KB/s on average is a stall
    (the whole-request deadline, 30 s by default, is the bound for a server that stops sending nothing at all)."""
    fake = hostile("trickle")
    fake.trickle_s = 0.05
    with FakeGitHubServer(fake) as github, GitHubClient(github.url, stall_s=0.5) as client:
        assert client.deadline == 30
        start = time.monotonic()
        with pytest.raises(UserError, match=r"GitHub sent .* in 0.5 s, slower than 8 KB/s; giving up"):
            client.get(client.url(f"repos/{REPO}/issues", {"state": "closed"}))
        assert time.monotonic() - start < 2
    # an answer at full speed is read as before with the same stall time
    fast = FakeGitHub(page_size=2)
    populate(fast)
    with FakeGitHubServer(fast) as github, GitHubClient(github.url, stall_s=0.5) as client:
        body, _next, _cached = client.get(client.url(f"repos/{REPO}/issues", {"state": "closed"}))
        assert len(body) == 2


@pytest.mark.parametrize("behaviour", ["huge", "endless"])
def test_a_huge_or_endless_body_is_refused_while_it_streams(behaviour: str) -> None:
    with FakeGitHubServer(hostile(behaviour)) as github, GitHubClient(github.url, max_bytes=1 << 20) as client:
        start = time.monotonic()
        with pytest.raises(UserError, match="larger than 1 MB; refusing it"):
            client.get(client.url(f"repos/{REPO}/issues"))
        assert time.monotonic() - start < 3
    assert github.sent.get(behaviour, 0) < 64 << 20  # the client hung up long before 1.2 GB


@pytest.mark.parametrize("behaviour", ["nested", "nested_900", "not_a_list"])
def test_deep_or_misshapen_json_is_one_line(behaviour: str, tmp_path: Path) -> None:
    with FakeGitHubServer(hostile(behaviour)) as github:
        result = CliRunner().invoke(app, ["sync-issues", REPO, "--api-url", github.url, "--index-dir", str(tmp_path / "i")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert ("nests deeper than" if behaviour.startswith("nested") else "where a list of issues was expected") in result.output


@pytest.mark.parametrize("path", [r"/issues$", r"/timeline$", r"/releases$"])
def test_wrong_json_types_are_skipped_never_a_traceback(path: str) -> None:
    from rlmedic.knowledge.sync import SyncReport, fetch_threads

    fake = hostile("wrong_types", path)
    reply = [comment("lead", "OWNER", "Fixed on main.")]
    fake.timelines[(REPO, 8)] = fake.timelines[(REPO, 9)] = reply
    with FakeGitHubServer(fake) as github, GitHubClient(github.url) as client:
        records = list(fetch_threads(client, REPO, SyncReport()))
    numbers = sorted(r["number"] for r in records)
    if path == r"/issues$":
        assert numbers == [8, 9]  # the two items with a usable number; every field of the wrong type is emptied
        assert all(isinstance(r["title"], str) and isinstance(r["labels"], list) for r in records)
    elif path == r"/timeline$":
        assert numbers == [1, 5]  # #2 was kept for its maintainer reply, which this timeline no longer has
    else:
        assert numbers == [1, 2, 5]  # the odd releases dropped, every thread kept


def test_a_401_that_echoes_the_token_never_prints_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "ghp_" + "R4nd0mT0k3n" * 3
    monkeypatch.setenv("MY_GH", token)
    with FakeGitHubServer(hostile("echo_auth")) as github:
        result = CliRunner().invoke(app, ["sync-issues", REPO, "--api-url", github.url, "--index-dir", str(tmp_path / "i"),
                                          "--token-env", "MY_GH"])
    assert github.log[0].authorization == f"Bearer {token}"  # it was sent, and echoed back
    assert result.exit_code == 2 and "GitHub refused the token" in result.output
    assert token not in result.output and token[4:20] not in result.output


def test_a_link_from_https_to_http_is_not_followed(tmp_path: Path) -> None:
    import ssl

    from fake_github import self_signed

    cert, key = self_signed(tmp_path)
    with FakeGitHubServer(hostile("downgrade"), tls=(cert, key)) as github:
        assert github.url.startswith("https://")
        client = GitHubClient(github.url, token="tok-secret", verify=ssl.create_default_context(cafile=cert))
        with client, pytest.raises(UserError, match=r"from https to http .*unencrypted"):
            list(client.paginate(client.url(f"repos/{REPO}/issues", {"state": "closed"})))
    assert len(github.log) == 1 and github.errors == []  # page 1 over TLS; nothing sent in clear to the same port


def test_a_gzip_answer_is_read_and_a_gzip_bomb_is_refused_at_the_cap() -> None:
    with FakeGitHubServer(hostile("gzip")) as github, GitHubClient(github.url) as client:
        body, _next, _cached = client.get(client.url(f"repos/{REPO}/issues", {"state": "closed"}))
        assert [i["number"] for i in body] == [6, 5]
    with FakeGitHubServer(hostile("gzip_bomb")) as github, GitHubClient(github.url, max_bytes=1 << 20) as client:
        with pytest.raises(UserError, match="larger than 1 MB"):
            client.get(client.url(f"repos/{REPO}/issues"))
