// The current run at a glance: its status, the loop's state (`state.changed`, as the state
// machine reports it), the tokens used so far, how full the context window is (a meter) and how
// often the context was compacted. The panel itself is not a live region (its counters change
// with every model call); a screen reader hears the run's status once per change, from the
// hidden `#run-announce` status line. Live from the run's events; the window and the counts the
// events do not carry come from `GET /status` (its `context` field), re-read after a model call.
import { runStatus } from "../api.js";
import { on } from "../bus.js";
import { el } from "../dom.js";

const TERMINAL = { "run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled" };
const REFRESH_MS = 400;

const number = (n) => Number(n).toLocaleString("en");

export class RunStatus {
  constructor(element, announcer = null) {
    this.element = element;
    this.announcer = announcer;
    this.announced = null;
    this.line = el("p", { class: "run-line" });
    this.tokens = el("p", { class: "run-tokens" });
    this.meter = el("meter", { id: "context-meter", min: "0", max: "1", value: "0" });
    this.meterText = el("span", { class: "run-context-text" });
    this.contextRow = el("div", { class: "run-context" },
                         el("label", { for: "context-meter", text: "Context" }),
                         this.meter, this.meterText);
    this.compactionsLine = el("p", { class: "run-compactions" });
    element.replaceChildren(this.line, this.tokens, this.contextRow, this.compactionsLine);
    this.reset();
    on("run:followed", ({ runId }) => this.start(runId));
    // another session (or a new one): its runs are followed anew (a stored run's stream may
    // have been cut before its end)
    on("session:changed", () => this.reset());
    on("run:event", (event) => {
      if (event.runId === this.runId) this.apply(event);
    });
  }

  reset() {
    this.runId = null;
    this.status = "idle";
    this.state = null;
    this.input = 0;
    this.output = 0;
    this.context = { tokens: null, window: null, compactions: 0 };
    clearTimeout(this.refreshTimer);
    this.render();
  }

  start(runId) {
    this.reset();
    this.runId = runId;
    this.status = "queued";
    this.render();
    this.refresh(0);
  }

  apply(event) {
    if (TERMINAL[event.type]) {
      this.status = TERMINAL[event.type];
      this.refresh();
    } else if (event.type === "run.started" || event.type === "run.resumed") {
      this.status = "running";
    } else if (event.type === "run.requeued") this.status = "queued";
    else if (event.type === "state.changed") this.state = event.to;
    else if (event.type === "usage") {
      this.input += event.inputTokens;
      this.output += event.outputTokens;
      this.context.tokens = event.inputTokens;  // what the call sent: the context's size
      this.refresh();
    } else if (event.type === "context.compacting") {
      this.context.window = event.window;
    } else if (event.type === "context.compacted") {
      this.context.tokens = event.tokensAfter;
      this.context.compactions += 1;
    } else return;
    this.render();
  }

  /** Read `GET /status` soon (once for a burst of events): the window and the counts. */
  refresh(delay = REFRESH_MS) {
    clearTimeout(this.refreshTimer);
    const runId = this.runId;
    this.refreshTimer = setTimeout(async () => {
      let st;
      try {
        st = await runStatus(runId);
      } catch {
        return;  // the events keep the panel going
      }
      if (runId !== this.runId) return;
      const ctx = st.context || {};
      if (ctx.window != null) this.context.window = ctx.window;
      if (ctx.tokens != null) this.context.tokens = ctx.tokens;
      this.context.compactions = Math.max(this.context.compactions, ctx.compactions || 0);
      if (st.state && !TERMINAL[`run.${this.status}`]) this.state = st.state;
      this.render();
    }, delay);
  }

  render() {
    const ended = Object.values(TERMINAL).includes(this.status);
    const parts = [`run: ${this.status}`];
    if (this.state && !ended) parts.push(`state: ${this.state}`);
    this.line.textContent = parts.join(" · ");
    this.tokens.textContent = this.input || this.output
      ? `tokens: ${number(this.input)} in / ${number(this.output)} out` : "";
    const { tokens, window, compactions } = this.context;
    this.contextRow.hidden = !this.runId;
    if (tokens != null && window) {
      this.meter.max = window;
      this.meter.value = Math.min(tokens, window);
      this.meter.low = window * 0.6;
      this.meter.high = window * 0.85;
      this.meter.optimum = 0;
      const pct = Math.round((100 * tokens) / window);
      this.meterText.textContent = `${number(tokens)} / ${number(window)} tokens (${pct}%)`;
      this.meter.setAttribute("aria-valuetext", this.meterText.textContent);
    } else {
      this.meter.max = 1;
      this.meter.value = 0;
      this.meterText.textContent = "not measured yet";
      this.meter.setAttribute("aria-valuetext", "not measured yet");
    }
    this.compactionsLine.textContent = compactions
      ? `compactions: ${compactions}` : "";
    this.element.dataset.status = this.status;
    this.announce();
    this.element.dataset.compactions = String(compactions);
  }

  /** Tell a screen reader the run's status when it changes (not its state, tokens, meter). */
  announce() {
    if (!this.announcer || this.status === this.announced) return;
    this.announced = this.status;
    // "idle" is no news (a session was opened): clear the line quietly
    this.announcer.textContent = this.status === "idle" ? "" : `Run ${this.status}`;
  }
}
