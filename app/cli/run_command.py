"""`agent-runtime run`: post a message, follow the run's event stream, map its end to an exit code."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from app.cli.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, CliError
from app.cli.render import Renderer, describe_error
from app.cli.sse import SSEParser
from app.cli.token_command import mint

if TYPE_CHECKING:
    import httpx

    from app.config import Settings

API_PREFIX = "/api/agent-runtime"


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        text = describe_error(error)
        return f"{text} (field: {error['field']})" if error.get("field") else text
    except Exception:  # noqa: BLE001 - not our error shape: show what the server said
        return f"HTTP {response.status_code}: {response.text[:300]}"


def _stream_events(client: httpx.Client, run_id: str, last_seq: int) -> Iterator[dict[str, Any]]:
    """One connection to the run's SSE stream, resuming after `last_seq`."""
    headers = {"Last-Event-ID": str(last_seq)} if last_seq else {}
    with client.stream(
        "GET", f"{API_PREFIX}/stream", params={"runId": run_id}, headers=headers
    ) as response:
        if response.status_code != 200:
            response.read()
            raise CliError(f"stream: {_error_text(response)}")
        parser = SSEParser()
        for line in response.iter_lines():
            event = parser.feed(line)
            if event is None:
                continue
            try:
                data = json.loads(event.data)
            except ValueError:
                continue
            if isinstance(data, dict):
                yield data


def follow_run(
    client: httpx.Client, run_id: str, renderer: Renderer, *, deadline: float | None = None
) -> int:
    """Render the run's events until it ends, reconnecting (with Last-Event-ID) if cut off."""
    import httpx

    failures = 0
    while True:
        try:
            for data in _stream_events(client, run_id, renderer.last_seq):
                failures = 0
                code = renderer.handle(data)
                if code is not None:
                    return code
                if deadline is not None and time.monotonic() > deadline:
                    return EXIT_RUN_FAILED
            reason = "the stream ended before the run did"
        except httpx.TransportError as e:
            reason = f"{type(e).__name__}: {e}"
        failures += 1
        if failures > 5 or (deadline is not None and time.monotonic() > deadline):
            renderer.end_line()
            raise CliError(f"lost the event stream of run {run_id} ({reason})")
        time.sleep(min(2.0, 0.25 * 2**failures))


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The `POST /api/agent-runtime` body of `run`'s arguments."""
    body: dict[str, Any] = {"message": args.message}
    if args.session:
        body["sessionKey"] = args.session
    if args.agent:
        body["agentId"] = args.agent
    if args.if_busy:
        body["ifBusy"] = args.if_busy
    return body


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """`run`: POST a message, stream the run to the terminal; Ctrl-C cancels it."""
    import httpx

    from app.serve import base_url

    url = (args.url or base_url(settings)).rstrip("/")
    token = args.token or mint(settings, args.user, args.tenant)
    body = request_body(args)
    timeout = httpx.Timeout(10.0, read=max(60.0, settings.sse_keepalive_seconds * 3))
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
    ) as client:
        run_id = _start_run(client, url, body)
        renderer = Renderer(sys.stdout)
        try:
            return follow_run(client, run_id, renderer)
        except KeyboardInterrupt:
            return _cancel_run(client, run_id, renderer)


def _start_run(client: httpx.Client, url: str, body: dict[str, Any]) -> str:
    """POST the message; announce the run on stderr and return its id."""
    import httpx

    try:
        response = client.post(API_PREFIX, json=body)
    except httpx.TransportError as e:
        raise CliError(f"cannot reach {url} ({e}); is `agent-runtime serve` running?") from e
    if response.status_code != 202:
        raise CliError(f"POST {API_PREFIX}: {_error_text(response)}")
    run = response.json()
    run_id = str(run["runId"])
    how = {"steered": "steered into run", "collected": "collected into run"}
    print(
        f"{how.get(run.get('status', 'queued'), 'run')} {run_id} · session "
        f"{run.get('sessionKey')} · Ctrl-C cancels",
        file=sys.stderr,
        flush=True,
    )
    return run_id


def _cancel_run(client: httpx.Client, run_id: str, renderer: Renderer) -> int:
    """After Ctrl-C: cancel the run and show how it ends (15 s at most; Ctrl-C again quits)."""
    renderer.end_line()
    print("cancelling… (Ctrl-C again to quit now)", file=sys.stderr, flush=True)
    try:
        cancel = client.post(f"{API_PREFIX}/cancel", params={"runId": run_id})
        if cancel.status_code >= 400:
            raise CliError(f"cancel: {_error_text(cancel)}") from None
        return follow_run(client, run_id, renderer, deadline=time.monotonic() + 15)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
