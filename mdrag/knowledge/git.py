"""Git sources: which URLs a config may name, running git, and :class:`GitRepoLoader`, which clones a source.

A config file comes from a project a user may have just cloned, so a URL that could make git run a command
(a ``<transport>::`` helper, a leading ``-``) is always refused, and local paths only when the config allows
them. Git runs without a terminal prompt, in the C locale, with a time limit; its errors become a
:class:`DocsetError` that says what to check.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mdrag.errors import DocsetError
from mdrag.knowledge.files import select_files, sync
from mdrag.knowledge.model import CONTROL, DRIVE, Progress, Selection, SourceResult, WebSource
from mdrag.redact import redact_url

__all__ = ["GitRepoLoader", "validate_git_url"]

log = logging.getLogger(__name__)

MIN_FREE_BYTES = 100 * 1024 * 1024  # checked on the clone's and the docset's filesystems before cloning
GIT_TIMEOUT = 300.0  # seconds for one clone

_TRANSPORT = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP = re.compile(r"^(?:[A-Za-z0-9._~+-]+@)?(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):(?!//)(\S+)$")
_REMOTE_SCHEMES = ("https", "http", "ssh", "git")


def validate_git_url(url: str, allow_local: bool, *, must_exist: bool = True, base: Path | None = None) -> str:
    """Check a git source URL; return it unchanged or raise DocsetError explaining the rule.

    Accepted: https://, http://, ssh://, git:// and scp-like ``user@host:path``. Local
    paths and file:// URLs only with ``allow_local`` (then, with ``must_exist``, the
    path must exist; a relative one is read from ``base``). Transport helpers
    (``ext::`` and any ``<transport>::``), a leading ``-``, whitespace and control
    characters are always refused: they would let a config file run commands.
    """
    rule = "use https://host/owner/repo.git, ssh://host/repo.git, git://host/repo.git or user@host:owner/repo.git"
    if not isinstance(url, str) or not url:
        raise DocsetError(f"the git URL is empty; {rule}")
    if url.startswith("-"):
        raise DocsetError(f"git URL {url!r} must not start with '-' (it would be read as a git option); {rule}")
    if any(c.isspace() for c in url) or CONTROL.search(url):
        raise DocsetError(f"git URL {url!r} must not contain spaces or control characters; {rule}")
    if _TRANSPORT.match(url):
        raise DocsetError(f"git URL {redact_url(url)!r} uses a '<transport>::' helper, which can run commands; {rule}")
    local: str | None = None
    m = _SCHEME.match(url)
    if m:
        scheme = m.group(1).lower()
        if scheme == "file":
            local = unquote(urlsplit(url).path)
        elif scheme in _REMOTE_SCHEMES:
            parts = urlsplit(url)
            host = parts.hostname or ""
            if not host or host.startswith("-") or (parts.username or "").startswith("-"):
                raise DocsetError(f"git URL {redact_url(url)!r} has no valid host name; {rule}")
        else:
            raise DocsetError(f"git URL scheme {scheme!r} is not supported; {rule}")
    elif DRIVE.match(url) or not _SCP.match(url):
        local = url
    if local is not None:
        if not allow_local:
            raise DocsetError(
                f"git URL {url!r} is a local path or file:// URL, which is refused unless the config sets "
                f"`allow_local_git: true`; {rule}"
            )
        if must_exist:
            p = Path(local).expanduser()
            if not p.is_absolute() and base is not None:
                p = base / p
            if not p.exists():
                raise DocsetError(f"local git repository {p} does not exist; check the url in the config")
    return url


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    env.update(GIT_TERMINAL_PROMPT="0", GCM_INTERACTIVE="never", LC_ALL="C", LANGUAGE="C")
    return env


def _git_options(allow_local: bool) -> list[str]:
    opts = ["-c", "protocol.ext.allow=never"]
    return opts if allow_local else [*opts, "-c", "protocol.file.allow=never"]


# Substrings of git's stderr (LC_ALL=C) that tell why a clone failed.
_AUTH_HINTS = (
    "authentication failed|could not read username|could not read password|permission denied|terminal prompts disabled"
    "|access denied|invalid username or password|returned error: 401|returned error: 403"
).split("|")
_NETWORK_HINTS = (
    "could not resolve host|temporary failure in name resolution|connection refused|connection timed out"
    "|connection reset|network is unreachable|no route to host|failed to connect|operation timed out|early eof"
).split("|")
_NOT_FOUND_HINTS = ("does not appear to be a git repository", "repository not found", "not found", "does not exist")


class GitRepoLoader:
    """Clones git sources; :func:`mdrag.knowledge.files.select_files` decides which of their files are kept."""

    def select_files(self, repo_dir: Path, paths: Sequence[str] = ()) -> Selection:
        """The files of ``repo_dir`` that become part of a docset: :func:`~mdrag.knowledge.files.select_files`."""
        return select_files(repo_dir, paths)

    def load(self, source: WebSource, dest: Path, allow_local: bool, *, base: Path | None = None) -> SourceResult:
        """Clone ``source``, copy its selected files into ``dest`` and update the metadata there.

        Only new and changed files are written (unchanged ones keep their mtime),
        files this source created before and no longer selects are removed.
        Raises DocsetError with a user-facing message on any failure; ``dest``
        is untouched when the clone fails. ``base`` resolves relative local URLs.
        """
        url = validate_git_url(source.url, allow_local, base=base)
        dest = Path(dest)
        _check_space(dest, url)
        with tempfile.TemporaryDirectory(prefix="mdrag-clone-", ignore_cleanup_errors=True) as tmp:
            _check_space(Path(tmp), url)
            repo = Path(tmp) / "repo"
            self._clone(source, repo, allow_local, base)
            selection = select_files(repo, source.paths)
            commit = _run(["git", "-C", str(repo), "rev-parse", "HEAD"], None, 30)
            head = commit.stdout.strip() if commit.returncode == 0 else None
            return sync(source, repo, selection, dest, head)

    def _clone(self, source: WebSource, repo: Path, allow_local: bool, base: Path | None) -> None:
        """Clone ``source`` into ``repo``; git's progress ("Receiving objects:  42% ...") goes to the log at
        debug level (a front end shows one line per source, not git's every step)."""
        shown = redact_url(source.url)
        argv = ["git", *_git_options(allow_local), "clone", "--depth", "1", "--single-branch", "--no-tags"]
        if source.branch:
            argv.append(f"--branch={source.branch}")
        argv += ["--progress", "--", source.url, str(repo)]
        code, err = _run_streaming(argv, base, lambda line: log.debug("git clone of %s: %s", shown, line))
        if code == 0:
            return
        log.warning("git clone of %s failed (exit %s):\n%s", shown, code, err)
        low = err.lower()
        if source.branch and "remote branch" in low and "not found" in low:
            branches = self.remote_branches(source.url, allow_local, base)
            listed = ", ".join(branches) if branches else "(the branches could not be listed)"
            raise DocsetError(
                f"branch {source.branch!r} not found in {shown}; available: {listed}. Fix `branch` in the config"
            )
        if any(h in low for h in _AUTH_HINTS):
            raise DocsetError(
                f"authentication failed for {shown}: check your Git credentials (credential helper, SSH key "
                "or access token) and that you can access the repository"
            )
        if any(h in low for h in _NETWORK_HINTS):
            raise DocsetError(f"cannot reach {shown}: check your internet connection, then retry")
        if any(h in low for h in _NOT_FOUND_HINTS):
            raise DocsetError(f"no git repository found at {shown}: check the url in the config")
        fatal = [line for line in err.splitlines() if line.startswith(("fatal:", "error:"))]
        detail = (fatal or err.splitlines() or [f"exit code {code}"])[-1]
        raise DocsetError(f"git clone of {shown} failed: {detail}")

    def remote_branches(self, url: str, allow_local: bool = False, base: Path | None = None) -> list[str]:
        """Branch names of a remote (``git ls-remote --heads``); [] when they cannot be listed."""
        try:
            proc = _run(["git", *_git_options(allow_local), "ls-remote", "--heads", "--", url], base, 60)
        except DocsetError:
            return []
        if proc.returncode != 0:
            return []
        refs = (line.split("\t", 1)[-1] for line in proc.stdout.splitlines())
        return sorted(r.removeprefix("refs/heads/") for r in refs if r.startswith("refs/heads/"))


def _run(argv: list[str], cwd: Path | None, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, cwd=cwd, env=_git_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError as e:
        raise DocsetError("git is not installed or not on PATH; install Git and retry") from e
    except subprocess.TimeoutExpired as e:
        raise DocsetError(f"git timed out after {timeout:.0f} s; check your internet connection, then retry") from e


def _run_streaming(argv: list[str], cwd: Path | None, progress: Progress | None) -> tuple[int, str]:
    """Run git, passing its progress lines ("Receiving objects:  42% ...") to ``progress`` on the calling thread.

    Returns the exit code and stderr without the progress lines; a timer kills git after GIT_TIMEOUT.
    """
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=_git_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
    except FileNotFoundError as e:
        raise DocsetError("git is not installed or not on PATH; install Git and retry") from e
    assert proc.stderr is not None
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(GIT_TIMEOUT, expire)
    timer.daemon = True
    timer.start()
    lines: list[str] = []
    buf = b""
    try:
        while chunk := os.read(proc.stderr.fileno(), 4096):
            *parts, buf = re.split(rb"[\r\n]", buf + chunk)  # git redraws progress lines with \r
            for line in (part.decode("utf-8", "replace").strip() for part in parts):
                if line and "%" not in line:
                    lines.append(line)
                elif line and progress is not None:
                    progress(line)
    except BaseException:
        proc.kill()
        raise
    finally:
        timer.cancel()
        code = proc.wait()
        proc.stderr.close()
    if expired.is_set():
        raise DocsetError(f"git timed out after {GIT_TIMEOUT:.0f} s; check your internet connection, then retry")
    if buf.strip():
        lines.append(buf.decode("utf-8", "replace").strip())
    return code, "\n".join(lines)


def _check_space(path: Path, url: str) -> None:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if free < MIN_FREE_BYTES:
        raise DocsetError(
            f"storage error: only {free // 2**20} MB free on {existing}; at least {MIN_FREE_BYTES // 2**20} MB "
            f"are needed before loading {redact_url(url)}. Free some disk space, then retry"
        )
