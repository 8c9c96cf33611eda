// The public HTTP API, and nothing else: every call the page makes goes through here.
const BASE = "/api/agent-runtime";

let token = null;

export function setToken(value) {
  token = value;
}

export function hasToken() {
  return Boolean(token);
}

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

// Signed out (in this tab or another), a poll or a stream still scheduled must not go out
// without a token: it fails here, with no request, while the page returns to the sign-in card.
function signedOut() {
  return new ApiError(401, { error: { code: "signed_out", message: "signed out" } });
}

/** Any call of the public API (path relative to /api/agent-runtime); throws ApiError. */
export async function call(method, path, { body, query } = {}) {
  if (!token) throw signedOut();
  const url = new URL(BASE + path, location.origin);
  for (const [k, v] of Object.entries(query || {})) url.searchParams.set(k, v);
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(url, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = r.headers.get("content-type")?.includes("json") ? await r.json() : null;
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

/** POST /api/agent-runtime: {runId, sessionKey, status}. */
export function postMessage({ message, sessionKey, agentId, ifBusy }) {
  const body = { message };
  if (sessionKey) body.sessionKey = sessionKey;
  if (agentId) body.agentId = agentId;
  if (ifBusy) body.ifBusy = ifBusy;
  return call("POST", "", { body });
}

export function cancelRun(runId) {
  return call("POST", "/cancel", { query: { runId } });
}

export function runStatus(runId) {
  return call("GET", "/status", { query: { runId } });
}

export const TERMINAL = ["run.completed", "run.failed", "run.cancelled"];
export const EVENT_TYPES = [
  "run.queued", "run.started", "run.requeued", "run.resumed", "assistant.delta",
  "thinking.delta", "assistant.reset", "model.retry", "model.fallback", "assistant.message",
  "tool.started", "tool.completed", "tool.failed", "usage", "state.changed", "approval.required",
  "approval.resolved", "plan.created", "plan.updated", "plan.step", "plan.invalid",
  "context.compacting", "context.compacted", "context.compaction_failed", "memory.flushed",
  "subagent.spawned", "subagent.completed", "message.injected", "run.interrupted",
  "run.completed", "run.failed", "run.cancelled",
];

/**
 * Follow a run's events (SSE) with a stream ticket: EventSource cannot send a header, so the
 * bearer token is traded for a short-lived ticket bound to this run. EventSource reconnects by
 * itself with Last-Event-ID; a terminal event closes the stream. Returns a function that stops.
 */
export async function followRun(runId, onEvent) {
  const { ticket } = await call("POST", "/stream-tickets", { body: { runId } });
  const url = new URL(BASE + "/stream", location.origin);
  url.searchParams.set("runId", runId);
  url.searchParams.set("ticket", ticket);
  const source = new EventSource(url);
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (e) => {
      const event = JSON.parse(e.data);
      if (TERMINAL.includes(event.type)) source.close();
      onEvent(event);
    });
  }
  return () => source.close();
}

/**
 * A session workspace file as a Blob (GET /sessions/{key}/files/{path}, with the bearer header,
 * which a plain link cannot send). The Blob's type is always application/octet-stream, so a
 * Blob URL of it downloads and never renders as a page of this origin.
 */
export async function workspaceFile(sessionKey, path) {
  const encoded = path.split("/").map(encodeURIComponent).join("/");
  const url = new URL(
    `${BASE}/sessions/${encodeURIComponent(sessionKey)}/files/${encoded}`, location.origin,
  );
  if (!token) throw signedOut();
  const r = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
  if (!r.ok) {
    const data = r.headers.get("content-type")?.includes("json") ? await r.json() : null;
    throw new ApiError(r.status, data);
  }
  return new Blob([await r.arrayBuffer()], { type: "application/octet-stream" });
}
