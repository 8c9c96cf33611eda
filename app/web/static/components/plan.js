// The plan of a plan-mode run (#plan): its steps with their status, a progress bar, the current
// revision and why it was made, earlier revisions (collapsed), and rejected plans. Driven only by
// the followed run's events (`plan.created`, `plan.updated`, `plan.step`, `plan.invalid`); the
// panel stays hidden for runs without a plan.
import { on } from "../bus.js";
import { el } from "../dom.js";

const STATUS_TEXT = {
  pending: "pending", running: "running", done: "done", failed: "failed", skipped: "skipped",
};

function stepList(steps) {
  const list = el("ol", { class: "plan-steps" });
  for (const step of steps) {
    const status = el("span", { class: "plan-status", text: STATUS_TEXT[step.status] || step.status });
    const li = el("li", { class: `plan-step ${step.status}` }, status,
                  el("span", { class: "plan-desc", text: step.description }));
    li.dataset.status = step.status;
    li.dataset.index = String(step.index);
    li.value = step.index;
    if (step.tools?.length) li.append(el("span", { class: "plan-tools", text: step.tools.join(", ") }));
    if (step.reason) li.append(el("span", { class: "plan-reason", text: step.reason }));
    list.append(li);
  }
  return list;
}

export class Plan {
  constructor(element) {
    this.element = element;
    this.reset(null);
    on("run:followed", ({ runId }) => this.reset(runId));
    on("session:changed", ({ sessionKey }) => {
      if (!sessionKey) this.reset(null);
    });
    on("run:event", (event) => {
      if (event.runId === this.runId) this.apply(event);
    });
  }

  reset(runId) {
    this.runId = runId;
    this.steps = [];  // the current revision's steps: {index, description, tools, status, reason}
    this.revision = 0;
    this.reason = null;
    this.earlier = [];  // [{revision, reason, steps}] as each was when it was replaced
    this.invalid = [];  // [{attempt, error}]
    this.render();
  }

  apply(event) {
    switch (event.type) {
      case "plan.created":
        this.steps = event.plan.steps.map((s) => ({ ...s }));
        break;
      case "plan.updated":
        this.earlier.push({ revision: this.revision, reason: this.reason, steps: this.steps });
        this.steps = event.plan.steps.map((s) => ({
          ...s,
          reason: this.steps.find((old) => old.index === s.index)?.reason,  // why it failed
          replaced: s.status === "failed",
        }));
        this.revision = event.revision;
        this.reason = event.reason;
        break;
      case "plan.step": {
        const step = this.steps.find((s) => s.index === event.index);
        if (!step) return;
        step.status = event.status;
        if (event.reason) step.reason = event.reason;
        if (event.description) step.description = event.description;
        break;
      }
      case "plan.invalid":
        this.invalid.push({ attempt: event.attempt, error: event.error });
        break;
      default:
        return;
    }
    this.render();
  }

  render() {
    const shown = this.steps.length > 0 || this.invalid.length > 0;
    this.element.hidden = !shown;
    if (!shown) {
      this.element.replaceChildren();
      return;
    }
    // a revision replaces the failed step (and skips the rest): neither counts any more
    const counted = this.steps.filter((s) => s.status !== "skipped" && !s.replaced);
    const done = counted.filter((s) => s.status === "done").length;
    const label = `${done} of ${counted.length} steps done`;
    const heading = el("h2", { text: this.revision ? `Plan (revision ${this.revision})` : "Plan" });
    const progress = el("progress", { max: String(Math.max(counted.length, 1)),
                                      value: String(done), "aria-label": label });
    const children = [heading];
    if (this.steps.length) {
      children.push(el("div", { class: "plan-progress" }, progress,
                       el("span", { class: "plan-count", text: label })));
      if (this.revision) {
        children.push(el("p", { class: "plan-revised",
                                text: `Revised${this.reason ? `: ${this.reason}` : ""}` }));
      }
      children.push(stepList(this.steps));
    }
    for (const { attempt, error } of this.invalid) {
      children.push(el("p", { class: "plan-invalid", role: "note",
                              text: `Plan rejected (attempt ${attempt}): ${error}` }));
    }
    if (this.earlier.length) {
      const details = el("details", { class: "plan-earlier" },
                         el("summary", { text: `Earlier revisions (${this.earlier.length})` }));
      details.open = Boolean(this.element.querySelector(".plan-earlier")?.open);  // as it was
      for (const old of [...this.earlier].reverse()) {
        const title = old.revision ? `Revision ${old.revision}` : "First plan";
        details.append(el("h3", { text: old.reason ? `${title}: ${old.reason}` : title }),
                       stepList(old.steps));
      }
      children.push(details);
    }
    this.element.replaceChildren(...children);
    this.element.dataset.done = String(done);
    this.element.dataset.total = String(counted.length);
  }
}
