// A tool call as a card: name, arguments, then its result or error and how long it took.
// Sandbox results (run_shell, run_python) show the exit code, stdout and stderr apart, and the
// files the program changed; files written by a tool can be downloaded from the session's
// workspace (through api.js, as a Blob: never rendered). Everything is shown as text (JSON
// pretty-printed), never as HTML.
import { workspaceFile } from "../api.js";
import { el } from "../dom.js";

/** Tools whose result is a sandbox run (`exitCode`, `stdout`, `stderr`, `files`, …). */
const SANDBOX_TOOLS = new Set(["run_shell", "run_python"]);
/** Tools whose result names one file of the workspace they wrote (`path`). */
const FILE_TOOLS = new Set(["write_file", "edit_file"]);

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

function size(bytes) {
  if (typeof bytes !== "number") return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** Save a workspace file: fetched with the bearer header, handed over as a Blob URL. */
async function download(sessionKey, path, status) {
  status.textContent = "downloading…";
  try {
    const blob = await workspaceFile(sessionKey, path);
    const url = URL.createObjectURL(blob);
    const a = el("a", { href: url, download: path.split("/").pop() || "file" });
    a.hidden = true;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
    status.textContent = "";
  } catch (err) {
    status.textContent = `cannot download: ${err.message}`;
  }
}

function fileItem(sessionKey, path, bytes) {
  const li = el("li", { class: "tool-file" });
  li.dataset.path = path;
  const status = el("span", { class: "tool-file-status", role: "status" });
  if (sessionKey) {
    const button = el("button", { type: "button", class: "file-download",
                                  "aria-label": `Download ${path}`, text: path });
    button.addEventListener("click", () => download(sessionKey, path, status));
    li.append(button);
  } else {
    li.append(el("code", { text: path }));
  }
  if (bytes !== undefined) li.append(el("span", { class: "tool-file-size", text: size(bytes) }));
  li.append(status);
  return li;
}

function filesList(sessionKey, files) {
  const written = files?.written || [];
  const deleted = files?.deleted || [];
  const skipped = files?.skipped || [];
  if (!written.length && !deleted.length && !skipped.length) return null;
  const list = el("ul");
  for (const f of written) list.append(fileItem(sessionKey, f.path, f.size));
  for (const path of deleted) {
    list.append(el("li", { class: "tool-file deleted" }, el("code", { text: path }), " deleted"));
  }
  for (const s of skipped) {
    list.append(el("li", { class: "tool-file skipped" }, el("code", { text: s.path }),
                   ` not saved: ${s.reason}`));
  }
  return el("div", { class: "tool-files" }, el("span", { class: "tool-label", text: "Files changed" }), list);
}

function output(name, text, truncated, className) {
  const details = el("details", { class: `tool-output ${className}` },
                     el("summary", { text: truncated ? `${name} (cut in the middle)` : name }));
  if (text) {
    details.open = true;
    details.append(el("pre", { text }));
  } else {
    details.append(el("p", { class: "tool-empty", text: "(empty)" }));
  }
  return details;
}

function sandboxResult(card, result) {
  const parts = [];
  const exit = el("div", { class: "tool-exit" });
  const code = result.exitCode;
  exit.dataset.exitCode = String(code);
  exit.textContent = [
    code === null || code === undefined ? "no exit code" : `exit code ${code}`,
    typeof result.durationSeconds === "number" ? `${result.durationSeconds} s` : null,
    result.timedOut ? `timed out after ${result.timeoutSeconds} s` : null,
  ].filter(Boolean).join(" · ");
  if (code !== 0) exit.classList.add("nonzero");
  parts.push(exit,
             output("stdout", result.stdout, result.stdoutTruncated, "tool-stdout"),
             output("stderr", result.stderr, result.stderrTruncated, "tool-stderr"));
  const files = filesList(card._sessionKey, result.files);
  if (files) parts.push(files);
  parts.push(section("result (JSON)", result, "tool-result"));
  return parts;
}

/**
 * A tool call's card (an `li` for #messages) from its `tool.started` event — or from the
 * `approval.required` event of a call that waits for approval, or the `tool.failed` event of a
 * call refused before it started (no arguments then).
 * `options.sessionKey`: the session the run belongs to, to download the files it wrote.
 */
export function createToolCard(event, options = {}) {
  const tool = event.name ?? event.tool;
  const card = document.createElement("li");
  card.className = "tool-card running";
  card.dataset.toolCallId = event.toolCallId;
  card.setAttribute("aria-label", `Tool call ${tool}`);
  const head = document.createElement("div");
  head.className = "tool-head";
  const name = document.createElement("span");
  name.className = "tool-name";
  name.textContent = tool;
  const state = document.createElement("span");
  state.className = "tool-state";
  state.textContent = "running…";
  head.append(name, state);
  card.append(head);
  const program = SANDBOX_TOOLS.has(tool) && (event.args?.command ?? event.args?.code);
  if (typeof program === "string") card.append(el("pre", { class: "tool-program", text: program }));
  if (event.args !== undefined) card.append(section("arguments", event.args, "tool-args"));
  card._started = Date.parse(event.ts) || Date.now();
  card._sessionKey = options.sessionKey || null;
  if (event.type === "approval.required") {
    card.classList.replace("running", "waiting");
    state.textContent = "waiting for approval…";
  }
  return card;
}

/** The call of a card made while it waited for approval started (its `tool.started` event). */
export function startToolCard(card, event) {
  card.classList.replace("waiting", "running");
  card.querySelector(".tool-state").textContent = "running…";
  card._started = Date.parse(event.ts) || Date.now();
}

/** The run ended while the call waited or ran (e.g. cancelled): say so, if it is still open. */
export function abandonToolCard(card, why) {
  if (!card.classList.contains("running") && !card.classList.contains("waiting")) return;
  card.classList.remove("running", "waiting");
  card.classList.add("failed");
  card.querySelector(".tool-state").textContent = `not finished: ${why}`;
}

/** Complete a card with its `tool.completed` or `tool.failed` event. */
export function finishToolCard(card, event) {
  const failed = event.type === "tool.failed";
  card.classList.remove("running", "waiting");
  card.classList.add(failed ? "failed" : "completed");
  const ms = (Date.parse(event.ts) || Date.now()) - card._started;
  card.querySelector(".tool-state").textContent =
    `${failed ? "failed" : "done"} in ${(ms / 1000).toFixed(1)} s`;
  if (failed) {
    const body = section("error", event.error ?? "failed", "tool-error");
    body.open = true;
    card.appendChild(body);
    return;
  }
  const result = event.result;
  const isObject = result && typeof result === "object" && !Array.isArray(result);
  if (isObject && SANDBOX_TOOLS.has(event.name) && "exitCode" in result) {
    card.append(...sandboxResult(card, result));
  } else if (isObject && FILE_TOOLS.has(event.name) && typeof result.path === "string") {
    const files = filesList(card._sessionKey, { written: [{ path: result.path, size: result.size }] });
    card.append(files, section("result", result, "tool-result"));
  } else {
    card.appendChild(section("result", result, "tool-result"));
  }
}

/**
 * A card for a call read back from the stored transcript (a session opened from the list): the
 * assistant row's `call` ({id, name, args}) and its `tool_result` payload (null: none stored).
 * `startedAt`/`endedAt` are the two rows' `createdAt`. Built by the same two functions as a live
 * card, so both look alike.
 */
export function storedToolCard(call, result, startedAt, endedAt, sessionKey = null) {
  const card = createToolCard({ toolCallId: call.id, name: call.name, args: call.args || {},
                                ts: startedAt }, { sessionKey });
  card.dataset.stored = "true";
  if (result) {
    finishToolCard(card, {
      type: result.ok ? "tool.completed" : "tool.failed", toolCallId: call.id, name: call.name,
      result: result.result, error: result.error, ts: endedAt,
    });
  }
  return card;
}
