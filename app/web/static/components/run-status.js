// The current run at a glance: its status, the loop's state and the tokens used so far.
import { on } from "../bus.js";

export class RunStatus {
  constructor(element) {
    this.element = element;
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
    this.render();
  }

  start(runId) {
    this.reset();
    this.runId = runId;
    this.status = "queued";
    this.render();
  }

  apply(event) {
    if (event.type === "run.started" || event.type === "run.resumed") this.status = "running";
    else if (event.type === "run.requeued") this.status = "queued";
    else if (event.type === "run.completed") this.status = "completed";
    else if (event.type === "run.failed") this.status = "failed";
    else if (event.type === "run.cancelled") this.status = "cancelled";
    else if (event.type === "state.changed") this.state = event.to;
    else if (event.type === "usage") {
      this.input += event.inputTokens;
      this.output += event.outputTokens;
    } else return;
    this.render();
  }

  render() {
    const parts = [`run: ${this.status}`];
    if (this.state && !["completed", "cancelled", "failed"].includes(this.status)) {
      parts.push(`state: ${this.state}`);
    }
    if (this.input || this.output) parts.push(`tokens: ${this.input} in / ${this.output} out`);
    this.element.textContent = parts.join(" · ");
    this.element.dataset.status = this.status;
  }
}
