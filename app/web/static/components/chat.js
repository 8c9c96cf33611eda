// The chat: the conversation (user messages, the assistant's streaming answer, tool cards,
// collapsed thinking), the composer (message + ifBusy) and the cancel button. It also opens a
// stored session (its history, then its live run) and keeps the open session in the URL
// (`#session=<key>`), so a reload reopens it and resumes a running run where it is.
import { TERMINAL, cancelRun, followRun, postMessage } from "../api.js";
import { emit, on } from "../bus.js";
import { compactionMarker } from "./compaction-marker.js";
import {
  injectedItem, isUserMessage, readSnapshot, renderRows, spawnedRuns, userItem,
} from "./history.js";
import { renderMarkdown } from "./markdown.js";
import {
  abandonToolCard, createToolCard, finishToolCard, startToolCard,
} from "./tool-card.js";

const HASH_KEY = "session";

/** The session key in the URL (`#session=<urlencoded key>`), or null. */
export function sessionFromUrl() {
  const value = new URLSearchParams(location.hash.slice(1)).get(HASH_KEY);
  return value || null;
}

function showSessionInUrl(sessionKey) {
  const url = new URL(location.href);
  url.hash = sessionKey ? new URLSearchParams({ [HASH_KEY]: sessionKey }).toString() : "";
  if (url.href !== location.href) history.replaceState(null, "", url.href.replace(/#$/, ""));
}

export class Chat {
  constructor(root) {
    this.list = root.querySelector("#messages");
    this.form = root.querySelector("#composer");
    this.input = root.querySelector("#message");
    this.ifBusy = root.querySelector("#if-busy");
    this.cancelButton = root.querySelector("#cancel");
    this.title = root.querySelector("#session-title");
    this.sessionKey = null;
    this.agentId = null;  // the agent of new sessions (the picker's choice; null: the default)
    this.runs = new Map();  // runId → {turn, stop, userShown, userSlot}
    this.lastSeq = 0;  // transcript rows up to here are shown (or belong to a streamed run)
    this.generation = 0;  // bumped on each session switch: late answers of the old one are dropped
    this.syncing = Promise.resolve();
    this.pendingSteers = [];  // texts this page steered into a run, shown when sent
    this.children = new Map();  // sub-agent runId → stop watching it
    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.send();
    });
    this.input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.send();
      }
    });
    this.cancelButton.addEventListener("click", () => this.cancel());
    on("session:new", () => this.newSession());
    on("session:open", ({ sessionKey }) => this.open(sessionKey));
    on("session:changed", ({ sessionKey }) => {
      showSessionInUrl(sessionKey);
      this.title.textContent = sessionKey ? `Session ${sessionKey}` : "New session";
    });
    window.addEventListener("hashchange", () => {
      const key = sessionFromUrl();
      if (key && key !== this.sessionKey) this.open(key);
    });
    on("agent:selected", ({ agentId }) => {
      this.agentId = agentId;
    });
  }

  /** Forget the shown session: stop following its runs, clear the conversation. */
  reset(sessionKey) {
    for (const run of this.runs.values()) run.stop?.();
    this.runs.clear();
    for (const stop of this.children.values()) stop?.();
    this.children.clear();
    this.generation += 1;
    this.sessionKey = sessionKey;
    this.sessionAgentId = null;
    this.lastSeq = 0;
    this.currentRunId = null;
    this.pendingSteers = [];
    this.list.replaceChildren();
    this.cancelButton.disabled = true;
  }

  newSession() {
    this.reset(null);
    emit("session:changed", { sessionKey: null, agentId: this.agentId });
    this.input.focus();
  }

  /** Open a stored session: its whole history, then its live run (if any) as it goes on. */
  open(sessionKey) {
    if (!sessionKey) return this.newSession();
    this.reset(sessionKey);
    this.list.setAttribute("aria-busy", "true");
    emit("session:changed", { sessionKey, agentId: this.agentId });
    return this.sync().finally(() => this.list.removeAttribute("aria-busy"));
  }

  /** Reopen the session named in the URL, if any (on page load). */
  openFromUrl() {
    const key = sessionFromUrl();
    return key ? this.open(key) : Promise.resolve();
  }

  /**
   * Bring the conversation up to date with what is stored: rows of finished runs not shown yet
   * are rendered, live runs not yet followed are followed from their first event. Runs one at a
   * time (each sync starts where the previous one stopped).
   */
  sync() {
    const generation = this.generation;
    this.syncing = this.syncing.then(() => this.syncOnce(generation)).catch((err) => {
      if (generation === this.generation) this.addItem("error", `Cannot load: ${err.message}`);
    });
    return this.syncing;
  }

  async syncOnce(generation) {
    if (generation !== this.generation || !this.sessionKey) return;
    const { session, rows, live } = await readSnapshot(this.sessionKey, this.lastSeq);
    if (generation !== this.generation) return;
    if (session.agentId !== this.sessionAgentId) {
      this.sessionAgentId = session.agentId;
      emit("session:agent", { agentId: session.agentId });
    }
    const shown = [];
    const inputs = new Map();  // live run → its input (the run's first user-role row)
    for (const row of rows) {
      this.lastSeq = Math.max(this.lastSeq, row.seq);
      const streamed = this.runs.get(row.runId);
      if (streamed || live.has(row.runId)) {
        // a streamed run's output comes from its events; only its input is taken from here
        if (isUserMessage(row)) {
          if (streamed) this.fillInput(streamed, row.payload);
          else if (!inputs.has(row.runId)) inputs.set(row.runId, row.payload);
        }
        continue;
      }
      shown.push(row);
    }
    for (const item of renderRows(shown, this.sessionKey)) this.list.appendChild(item);
    // sub-agents of the latest finished run may still be working: their outcome comes back
    const lastRun = shown.length ? shown[shown.length - 1].runId : null;
    for (const child of spawnedRuns(shown.filter((r) => r.runId === lastRun))) {
      this.watchChild(child);
    }
    for (const runId of live) {
      if (!this.runs.has(runId)) await this.follow(runId, { input: inputs.get(runId) });
    }
    this.list.lastElementChild?.scrollIntoView({ block: "end" });
  }

  /** Show a followed run's input (a stored user-role payload) where its output starts, once. */
  fillInput(run, payload) {
    if (run.userShown) return;
    run.userShown = true;
    const item = userItem(payload);
    run.userSlot.replaceWith(item);
    run.userSlot = item;
  }

  /**
   * Watch a sub-agent's run (not shown here: it has a session of its own). When it ends, its
   * outcome reaches this session, as an injected message or as a follow-up run the page then
   * follows: the child's end is what tells the page to look.
   */
  watchChild(runId) {
    if (this.children.has(runId)) return;
    const generation = this.generation;
    this.children.set(runId, null);
    followRun(runId, (event) => {
      if (TERMINAL.includes(event.type) && generation === this.generation) this.sync();
    }).then((stop) => {
      if (generation === this.generation) this.children.set(runId, stop);
      else stop();
    }).catch(() => {
      // cannot watch it (gone): a later sync still shows whatever came of it
    });
  }

  async send() {
    const message = this.input.value.trim();
    if (!message) return;
    this.input.value = "";
    this.addItem("user", message);
    let accepted;
    try {
      accepted = await postMessage({
        message,
        sessionKey: this.sessionKey,
        agentId: this.sessionKey ? undefined : this.agentId || undefined,
        ifBusy: this.ifBusy.value || undefined,
      });
    } catch (err) {
      this.addItem("error", `Not sent: ${err.message}`);
      return;
    }
    if (accepted.sessionKey !== this.sessionKey) {
      this.sessionKey = accepted.sessionKey;
      emit("session:changed", { sessionKey: this.sessionKey, agentId: this.agentId });
    }
    if (accepted.status !== "queued") {
      // the message reaches a run's inbox: its `message.injected` event must not show it again
      if (accepted.status === "steered") this.pendingSteers.push(message);
      this.addItem("note", `Message ${accepted.status} into run ${accepted.runId}`);
      return;
    }
    const known = this.runs.get(accepted.runId);
    if (known) {
      // a sync found the run first (it was live before this answer arrived): shown above
      known.userShown = true;
      known.userSlot?.remove();
      return;
    }
    await this.follow(accepted.runId, { inputShown: true });
  }

  /**
   * Follow a run's events from its first one. `input`: the run's user message, if known;
   * `inputShown`: it is already on the page (this page sent it). Otherwise a hidden slot keeps
   * its place until a sync finds the stored message.
   */
  async follow(runId, { input = null, inputShown = false } = {}) {
    if (this.runs.has(runId)) return;
    this.currentRunId = runId;
    emit("run:followed", { runId, sessionKey: this.sessionKey });
    this.cancelButton.disabled = false;
    const run = { turn: null, thinking: null, tools: new Map(), userShown: inputShown };
    if (!inputShown) {
      // keeps the input's place until its stored row is found (a queued run has none yet)
      run.userSlot = this.addItem("input-slot", "");
      run.userSlot.hidden = true;
      if (input != null) this.fillInput(run, input);
    }
    this.runs.set(runId, run);
    const generation = this.generation;
    try {
      const stop = await followRun(runId, (event) => {
        if (generation === this.generation) this.onEvent(run, event);
      });
      if (generation === this.generation) run.stop = stop;
      else stop();  // the session changed while connecting
    } catch (err) {
      if (generation === this.generation) {
        this.addItem("error", `Cannot follow the run: ${err.message}`);
      }
    }
  }

  async cancel() {
    if (!this.currentRunId) return;
    this.cancelButton.disabled = true;
    try {
      await cancelRun(this.currentRunId);
    } catch (err) {
      this.addItem("error", `Cancel failed: ${err.message}`);
    }
  }

  onEvent(run, event) {
    emit("run:event", event);
    switch (event.type) {
      case "assistant.delta":
        this.turn(run).append(event.text);
        break;
      case "thinking.delta":
        this.thinking(run).append(event.text);
        break;
      case "assistant.reset":
        run.turn?.remove();
        run.thinking?.remove();
        run.turn = run.thinking = null;
        break;
      case "assistant.message":
        // the turn's whole text: render it as Markdown, then the next turn starts afresh
        if (event.text) this.turn(run).finish(event.text);
        run.thinking?.finish();
        run.turn = run.thinking = null;
        break;
      case "approval.required":
      case "tool.started": {
        // a call that waited for approval already has its card
        const card = run.tools.get(event.toolCallId);
        if (!card) this.toolCard(run, event);
        else if (event.type === "tool.started") startToolCard(card, event);
        break;
      }
      case "tool.completed":
      case "tool.failed":  // a refused call (policy, denied) never started: no card yet
        finishToolCard(run.tools.get(event.toolCallId) || this.toolCard(run, event), event);
        break;
      case "context.compacted":
        this.list.appendChild(compactionMarker(event));
        break;
      case "message.injected":
        this.injected(event);
        break;
      case "subagent.spawned":
        this.watchChild(event.childRunId);
        break;
      case "run.completed":
        this.ended(run, event, "completed");
        break;
      case "run.failed":
        this.ended(run, event, `failed: ${event.error?.message || event.error?.code || "error"}`);
        break;
      case "run.cancelled":
        this.ended(run, event, `cancelled (${event.reason})`);
        break;
      default:
        break;
    }
    this.list.lastElementChild?.scrollIntoView({ block: "end" });
  }

  injected(event) {
    const mine = event.source === "user" ? this.pendingSteers.indexOf(event.text) : -1;
    if (mine >= 0) {
      this.pendingSteers.splice(mine, 1);  // this page showed it when sending it
      return;
    }
    this.list.appendChild(injectedItem(event.source, event.text));
  }

  ended(run, event, text) {
    run.turn?.finish();
    run.thinking?.finish();
    for (const card of run.tools.values()) abandonToolCard(card, `run ${text}`);
    this.addItem("note", `Run ${text}`).dataset.runEnd = event.type;
    if (event.runId === this.currentRunId) this.cancelButton.disabled = true;
    // what came after it (a queued run, a sub-agent's follow-up) and its input, if not shown
    if (this.sessionKey) this.sync();
  }

  toolCard(run, event) {
    const card = createToolCard(event, { sessionKey: this.sessionKey });
    run.tools.set(event.toolCallId, card);
    this.list.appendChild(card);
    return card;
  }

  turn(run) {
    if (!run.turn) run.turn = new AssistantTurn(this.addItem("assistant", ""));
    return run.turn;
  }

  thinking(run) {
    if (!run.thinking) {
      const details = document.createElement("details");  // collapsed by default
      details.className = "thinking";
      const summary = document.createElement("summary");
      summary.textContent = "Thinking";
      const body = document.createElement("div");
      details.append(summary, body);
      const li = this.addItem("thinking", "");
      li.appendChild(details);
      li.setAttribute("aria-busy", "true");  // read once whole, not delta by delta
      run.thinking = {
        append: (text) => body.append(text),
        remove: () => li.remove(),
        finish: () => li.removeAttribute("aria-busy"),
      };
    }
    return run.thinking;
  }

  addItem(kind, text) {
    const li = document.createElement("li");
    li.className = `msg ${kind}`;
    if (text) li.textContent = text;
    this.list.appendChild(li);
    return li;
  }
}

/** The assistant's answer: plain text while it streams, Markdown once the message is whole. */
class AssistantTurn {
  constructor(li) {
    this.li = li;
    this.li.setAttribute("aria-busy", "true");
    this.text = "";
  }

  append(text) {
    this.text += text;
    this.li.textContent = this.text;
  }

  finish(text = this.text) {
    this.text = text;
    this.li.replaceChildren(renderMarkdown(text));
    this.li.removeAttribute("aria-busy");
  }

  remove() {
    this.li.remove();
  }
}
