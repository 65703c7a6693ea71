"""``OpenLineage``: where a job's OpenLineage run events go.

The events themselves are built by the engine, the same as the command
line's ``--openlineage-url`` sends: START when a run begins, then COMPLETE,
FAIL or ABORT, with the table as the output dataset and the run's days and
counts in the ``backfill`` run facet.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional, Union

#: Where Marquez takes events when ``url`` has no path.
MARQUEZ_PATH = "/api/v1/lineage"


class OpenLineage:
    """Where a job's OpenLineage run events go: ``Job(lineage=OpenLineage(url=...))``.

    ``url``: an OpenLineage HTTP endpoint; one without a path is Marquez
    (``http://marquez:5000`` posts to ``/api/v1/lineage``). ``file``: a JSON
    Lines file the events are appended to, one line each. ``namespace`` and
    ``job`` name the job (``job`` defaults to the fetch's module and name);
    ``api_key`` is sent as a bearer token, and never appears in an event.

    Lineage is observability beside the run, never a reason for it to fail:
    a server that is down or answers an error, or a file that cannot be
    written, is a ``RuntimeWarning`` and the run's result is its own. The
    START event is sent while the run starts; the run's call returns once
    its last event was sent or given up (``timeout`` seconds for each
    event's connection and answer).
    """

    def __init__(
        self,
        url: Optional[str] = None,
        file: Union[str, "os.PathLike[str]", None] = None,
        *,
        namespace: str = "backfill",
        job: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: float = 10.0,
    ) -> None:
        if url is None and file is None:
            raise ValueError("OpenLineage needs a url, a file or both")
        if url is not None and urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"url must be an http:// or https:// URL, not {url!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        self.url = url
        self.file = os.fspath(file) if file is not None else None
        self.namespace = namespace
        self.job = job
        self.timeout = timeout
        self._api_key = api_key
        # One sender, so that a run's events leave in order.
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="backfill-lineage")

    def __repr__(self) -> str:
        shown = [f"{name}={value!r}" for name, value in (("url", self.url), ("file", self.file)) if value]
        shown.append(f"namespace={self.namespace!r}")
        if self.job is not None:
            shown.append(f"job={self.job!r}")
        return f"OpenLineage({', '.join(shown)})"

    @property
    def _secrets(self) -> list:
        """Texts the engine keeps out of every event."""
        return [self._api_key] if self._api_key else []

    def _target(self) -> str:
        assert self.url is not None
        parts = urllib.parse.urlsplit(self.url)
        if parts.path in ("", "/") and not parts.query:
            return self.url.rstrip("/") + MARQUEZ_PATH
        return self.url

    def _emit(self, text: str, last: bool) -> None:
        """Sends one event (its JSON text); waits for it and every event
        before it when it is a run's ``last``."""
        sent: Future = self._sender.submit(self._send, text)
        if last:
            try:
                # Behind it at most the run's START, each bounded by timeout.
                sent.result(timeout=2 * self.timeout + 1)
            except Exception as e:  # a timeout: the sender still runs
                warnings.warn(f"the lineage event was not sent in time: {e!r}", RuntimeWarning, stacklevel=2)

    def _send(self, text: str) -> None:
        if self.file is not None:
            try:
                with open(self.file, "a", encoding="utf-8") as f:
                    f.write(text + "\n")
            except OSError as e:
                warnings.warn(f"cannot write the lineage event to {self.file}: {e}", RuntimeWarning, stacklevel=2)
        if self.url is not None:
            target = self._target()
            request = urllib.request.Request(
                target,
                data=text.encode("utf-8"),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            if self._api_key:
                request.add_header("Authorization", f"Bearer {self._api_key}")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read()
            except (urllib.error.URLError, OSError, ValueError) as e:
                warnings.warn(f"cannot send the lineage event to {_redact(target)}: {e}", RuntimeWarning, stacklevel=2)


def _redact(url: str) -> str:
    """``url`` without its password."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
