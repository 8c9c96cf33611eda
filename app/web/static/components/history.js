// A session's stored history: read consistently with its live run, and turned into the
// conversation's items (the chat decides where they go).
//
// The rule that lets a reloaded page resume a run without losing or repeating output: stored
// transcript rows are shown only for runs that had finished; a live run is shown entirely from
// its event stream, replayed from its first event. `readSnapshot` makes "had finished" safe
// against a run ending (or starting) while the transcript is being read.
import { call } from "../api.js";
import { renderMarkdown } from "./markdown.js";
import { storedToolCard } from "./tool-card.js";

const PAGE = 1000;
const ATTEMPTS = 5;

function sessionPath(sessionKey) {
  return `/sessions/${encodeURIComponent(sessionKey)}`;
}

/** GET /sessions/{key}: the session with its `liveRunId` and `parentSessionKey`. */
export function getSession(sessionKey) {
  return call("GET", sessionPath(sessionKey));
}

async function readRows(sessionKey, afterSeq) {
  const rows = [];
  let after = afterSeq;
  for (;;) {
    const page = await call("GET", `${sessionPath(sessionKey)}/messages`,
                            { query: { afterSeq: after, limit: PAGE } });
    rows.push(...page.messages);
    if (page.nextAfterSeq == null) return rows;
    after = page.nextAfterSeq;
  }
}

/**
 * The session's transcript rows after `afterSeq`, and `live`: the runs whose rows must NOT be
 * shown (they are followed from their streams instead). Any other row returned belongs to a
 * run that had finished before the rows were read.
 *
 * The session is read before and after the rows. A session's runs take turns (one active at a
 * time, in order), so if both reads name the same live run and the session took no new run
 * (`updatedAt`), only that run can have written rows meanwhile; with no live run at all, no row
 * may have been written (`messageCount`). Otherwise something moved during the read: read again.
 * A run that ended between the two reads is in `live`: shown once, from its stream.
 */
export async function readSnapshot(sessionKey, afterSeq) {
  let before = await getSession(sessionKey);
  for (let attempt = 1; ; attempt += 1) {
    const rows = await readRows(sessionKey, afterSeq);
    const after = await getSession(sessionKey);
    const stable = before.liveRunId === after.liveRunId && before.updatedAt === after.updatedAt
      && (after.liveRunId !== null || before.messageCount === after.messageCount);
    if (stable || attempt >= ATTEMPTS) {
      const live = new Set([before.liveRunId, after.liveRunId].filter(Boolean));
      // still moving after every attempt: the newest rows' run may be partial, stream it too
      if (!stable && rows.length && rows[rows.length - 1].runId) {
        live.add(rows[rows.length - 1].runId);
      }
      return { session: after, rows, live };
    }
    before = after;
  }
}

/** A user-role row that is shown (plan-step prompts are the runtime's, not shown): a run's
 * first one is its input. */
export function isUserMessage(row) {
  return row.payload.kind === "user" && row.payload.step == null;
}

/** The item of a user-role message: what the user typed, or what reached the run from
 * elsewhere (`source`: a steer, a sub-agent's outcome, another agent). */
export function userItem(payload) {
  if (payload.source) return injectedItem(payload.source.kind, payload.text);
  return messageItem("user", document.createTextNode(payload.text));
}

const SOURCE_LABEL = { user: "Steered in", subagent: "From a sub-agent", agent: "From an agent" };

/** A message that reached a run from elsewhere (a steer, a sub-agent's outcome, a reply). */
export function injectedItem(sourceKind, text) {
  const li = document.createElement("li");
  li.className = sourceKind === "user" ? "msg user" : "msg injected";
  const label = document.createElement("span");
  label.className = "source";
  label.textContent = `${SOURCE_LABEL[sourceKind] || "Injected"}: `;
  li.append(label, text);
  return li;
}

/**
 * The conversation items of stored rows, in order: user messages, assistant answers (Markdown),
 * one finished tool card per call (its result found among `rows`). Plan-step prompts (the
 * runtime's, not the user's) are left out, as the live view leaves them out.
 */
export function renderRows(rows, sessionKey = null) {
  const results = new Map();
  for (const row of rows) {
    if (row.payload.kind === "tool_result") {
      results.set(`${row.runId}:${row.payload.toolCallId}`, row);
    }
  }
  const carded = new Set();
  const items = [];
  for (const row of rows) {
    const p = row.payload;
    if (p.kind === "user") {
      if (isUserMessage(row)) items.push(userItem(p));
    } else if (p.kind === "assistant") {
      if (p.text) items.push(messageItem("assistant", renderMarkdown(p.text)));
      for (const toolCall of p.toolCalls || []) {
        const key = `${row.runId}:${toolCall.id}`;
        const done = results.get(key);
        carded.add(key);
        items.push(storedToolCard(toolCall, done?.payload || null, row.createdAt,
                                  done?.createdAt || row.createdAt, sessionKey));
      }
    } else if (p.kind === "tool_result") {
      const key = `${row.runId}:${p.toolCallId}`;
      if (!carded.has(key)) {  // its call is not among these rows: a card of the result alone
        items.push(storedToolCard({ id: p.toolCallId, name: p.name, args: {} }, p,
                                  row.createdAt, row.createdAt, sessionKey));
      }
    }
  }
  for (const item of items) item.dataset.from = "transcript";
  return items;
}

/** The child runs that `sessions_spawn` calls among `rows` started (their run ids). */
export function spawnedRuns(rows) {
  return rows.filter((r) => r.payload.kind === "tool_result" && r.payload.name === "sessions_spawn"
                            && r.payload.ok && r.payload.result?.runId)
    .map((r) => r.payload.result.runId);
}

function messageItem(kind, content) {
  const li = document.createElement("li");
  li.className = `msg ${kind}`;
  li.appendChild(content);
  return li;
}
