// The chat: the conversation (user messages, the assistant's streaming answer, tool cards,
// collapsed thinking), the composer (message + ifBusy) and the cancel button.
import { cancelRun, followRun, postMessage } from "../api.js";
import { emit, on } from "../bus.js";
import { compactionMarker } from "./compaction-marker.js";
import { renderMarkdown } from "./markdown.js";
import {
  abandonToolCard, createToolCard, finishToolCard, startToolCard,
} from "./tool-card.js";

export class Chat {
  constructor(root) {
    this.list = root.querySelector("#messages");
    this.form = root.querySelector("#composer");
    this.input = root.querySelector("#message");
    this.ifBusy = root.querySelector("#if-busy");
    this.cancelButton = root.querySelector("#cancel");
    this.sessionKey = null;
    this.agentId = null;  // the agent of new sessions (the picker's choice; null: the default)
    this.runs = new Map();  // runId → {turn, stop}
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
    root.querySelector("#new-session").addEventListener("click", () => this.newSession());
    on("session:new", () => this.newSession());
    on("agent:selected", ({ agentId }) => {
      this.agentId = agentId;
    });
  }

  newSession() {
    for (const run of this.runs.values()) run.stop?.();
    this.runs.clear();
    this.sessionKey = null;
    this.list.replaceChildren();
    this.cancelButton.disabled = true;
    emit("session:changed", { sessionKey: null, agentId: this.agentId });
    this.input.focus();
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
      this.addItem("note", `Message ${accepted.status} into run ${accepted.runId}`);
      return;
    }
    await this.follow(accepted.runId);
  }

  async follow(runId) {
    this.currentRunId = runId;
    emit("run:followed", { runId, sessionKey: this.sessionKey });
    this.cancelButton.disabled = false;
    const run = { turn: null, thinking: null, tools: new Map() };
    this.runs.set(runId, run);
    try {
      run.stop = await followRun(runId, (event) => this.onEvent(run, event));
    } catch (err) {
      this.addItem("error", `Cannot follow the run: ${err.message}`);
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

  ended(run, event, text) {
    run.turn?.finish();
    for (const card of run.tools.values()) abandonToolCard(card, `run ${text}`);
    this.addItem("note", `Run ${text}`).dataset.runEnd = event.type;
    if (event.runId === this.currentRunId) this.cancelButton.disabled = true;
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
      run.thinking = { append: (text) => body.append(text), remove: () => li.remove() };
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
