// A tool call as a card: name, arguments, then its result or error and how long it took.
// Everything is shown as text (JSON pretty-printed), never as HTML.

function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function section(title, value, className) {
  const details = document.createElement("details");
  details.className = className;
  const summary = document.createElement("summary");
  summary.textContent = title;
  const pre = document.createElement("pre");
  pre.textContent = pretty(value);
  details.append(summary, pre);
  return details;
}

export function createToolCard(event) {
  const card = document.createElement("li");
  card.className = "tool-card running";
  card.dataset.toolCallId = event.toolCallId;
  card.setAttribute("aria-label", `Tool call ${event.name}`);
  const head = document.createElement("div");
  head.className = "tool-head";
  const name = document.createElement("span");
  name.className = "tool-name";
  name.textContent = event.name;
  const state = document.createElement("span");
  state.className = "tool-state";
  state.textContent = "running…";
  head.append(name, state);
  card.append(head, section("arguments", event.args, "tool-args"));
  card._started = Date.parse(event.ts) || Date.now();
  return card;
}

export function finishToolCard(card, event) {
  const failed = event.type === "tool.failed";
  card.classList.remove("running");
  card.classList.add(failed ? "failed" : "completed");
  const ms = (Date.parse(event.ts) || Date.now()) - card._started;
  card.querySelector(".tool-state").textContent =
    `${failed ? "failed" : "done"} in ${(ms / 1000).toFixed(1)} s`;
  const body = failed ? section("error", event.error ?? "failed", "tool-error")
                      : section("result", event.result, "tool-result");
  if (failed) body.open = true;
  card.appendChild(body);
}

/**
 * A card for a call read back from the stored transcript (a session opened from the list): the
 * assistant row's `call` ({id, name, args}) and its `tool_result` payload (null: none stored).
 * `startedAt`/`endedAt` are the two rows' `createdAt`. Built by the same two functions as a live
 * card, so both look alike.
 */
export function storedToolCard(call, result, startedAt, endedAt) {
  const card = createToolCard({ toolCallId: call.id, name: call.name, args: call.args || {},
                                ts: startedAt });
  card.dataset.stored = "true";
  if (result) {
    finishToolCard(card, {
      type: result.ok ? "tool.completed" : "tool.failed", toolCallId: call.id, name: call.name,
      result: result.result, error: result.error, ts: endedAt,
    });
  }
  return card;
}
