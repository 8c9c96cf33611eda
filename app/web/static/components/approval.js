// Approvals: a modal dialog for each pending tool approval the user may see, one after another.
// One the user may not decide (`canDecide` false: the rule's approverRole or allowSelfApproval)
// shows why, with Approve/Deny disabled; an error of a decision (e.g. 403) is shown in the dialog.
//
// Pending approvals come from two sources: the `approval.required` events of runs this tab
// follows (at once), and `GET /approvals?status=pending`, polled every 2 s and as soon as the tab
// is shown or focused — so every open tab sees every approval, whatever session it shows. An
// approval leaves the queue when it is decided here, when `approval.resolved` arrives, or when it
// drops out of the pending list (decided in another tab or through the API): the dialog then
// closes with a short note. Escape (or "Later") never decides anything: it tucks the queue into a
// banner with a button to come back.
import { ApiError, call, runStatus } from "../api.js";
import { emit, on } from "../bus.js";
import { trapFocus } from "./focus-trap.js";
import { el } from "../dom.js";

const POLL_MS = 2000;
const NOTE_MS = 6000;
/** `trustSeconds` choices of POST /approvals/{id} (0 … 86400). */
const TRUST_CHOICES = [
  [0, "No: ask again next time"],
  [300, "for 5 minutes"],
  [900, "for 15 minutes"],
  [3600, "for 1 hour"],
  [8 * 3600, "for 8 hours"],
  [86400, "for 24 hours"],
];
/** Tools whose main argument is a program: shown on its own, prominently. */
const PROGRAMS = { run_shell: "command", run_python: "code" };
const OUTCOMES = { approve: "approved", deny: "denied", expired: "expired" };

function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function countdown(ms) {
  if (ms <= 0) return "expired";
  const s = Math.ceil(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = String(s % 60).padStart(2, "0");
  return h ? `${h} h ${String(m).padStart(2, "0")} min` : `${m}:${rest} left`;
}

/** "approved by alice", "expired (run cancelled by alice)". */
function describe(decision, decidedBy, reason) {
  const outcome = OUTCOMES[decision] || decision;
  if (decision === "expired") return reason ? `${outcome} (${reason})` : outcome;
  return decidedBy ? `${outcome} by ${decidedBy}` : outcome;
}

export class Approvals {
  constructor(root) {
    this.root = root;
    this.pending = new Map();  // approvalId → {approval, addedAt, sessionKey}
    this.decidedHere = new Set();  // ids this tab decided (a stale poll must not bring them back)
    this.resolved = new Set();  // ids whose `approval.resolved` this tab has seen
    this.current = null;  // the approvalId in the dialog
    this.deferred = false;  // "Later": the queue waits in the banner
    this.polling = false;
    this.build();
    on("run:event", (event) => {
      if (event.type === "approval.required") this.required(event);
      else if (event.type === "approval.resolved") {
        this.resolved.add(event.approvalId);
        this.drop(event.approvalId, describe(event.decision, event.decidedBy, event.reason));
      }
    });
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible") this.poll();
    });
    window.addEventListener("focus", () => this.poll());
    setInterval(() => this.poll(), POLL_MS);
    setInterval(() => this.tick(), 1000);
    this.poll();
  }

  build() {
    this.title = el("h2", { id: "approval-title", tabindex: "-1" });
    this.position = el("p", { class: "approval-position" });
    this.risk = el("span", { class: "risk" });
    this.reason = el("dd", { id: "approval-reason" });
    this.session = el("dd", { class: "approval-session" });
    this.expiry = el("dd", { class: "approval-expiry" });
    const facts = el(
      "dl", { class: "approval-facts" },
      el("dt", { text: "Risk" }), el("dd", {}, this.risk),
      el("dt", { text: "Why" }), this.reason,
      el("dt", { text: "Session" }), this.session,
      el("dt", { text: "Expires" }), this.expiry,
    );
    this.what = el("div", { class: "approval-what" });
    this.trust = el("select", { id: "approval-trust" });
    for (const [seconds, label] of TRUST_CHOICES) {
      this.trust.append(el("option", { value: String(seconds), text: label }));
    }
    this.note = el("textarea", { id: "approval-note", rows: "2", maxlength: "2000" });
    this.error = el("p", { class: "approval-error", role: "alert" });
    this.laterButton = el("button", { type: "button", class: "later", text: "Later" });
    this.denyButton = el("button", { type: "button", class: "deny", text: "Deny" });
    this.approveButton = el("button", { type: "button", class: "approve", text: "Approve" });
    this.dialog = el(
      "dialog",
      { class: "approval", "aria-labelledby": "approval-title",
        "aria-describedby": "approval-reason" },
      this.title, this.position, facts,
      el("h3", { text: "What would run" }), this.what,
      el("div", { class: "approval-field" },
        el("label", { for: "approval-trust",
                      text: "If approved, also trust this tool in this session for the same reason" }),
        this.trust),
      el("div", { class: "approval-field" },
        el("label", { for: "approval-note", text: "Reason (optional, recorded with the decision)" }),
        this.note),
      this.error,
      el("div", { class: "approval-actions" }, this.laterButton, this.denyButton, this.approveButton),
    );
    trapFocus(this.dialog);
    this.approveButton.addEventListener("click", () => this.decide("approve"));
    this.denyButton.addEventListener("click", () => this.decide("deny"));
    this.laterButton.addEventListener("click", () => this.later());
    // Escape asks to close the dialog: never a decision, only "later"
    this.dialog.addEventListener("cancel", (e) => {
      e.preventDefault();
      this.later();
    });
    this.dialog.addEventListener("close", () => {
      // closed by the browser itself (e.g. a repeated Escape): the approval still waits
      if (this.current && this.pending.has(this.current)) this.later();
    });
    this.bannerText = el("span");
    this.reviewButton = el("button", { type: "button", text: "Review" });
    this.reviewButton.addEventListener("click", () => {
      this.deferred = false;
      this.render();
    });
    this.banner = el("div", { class: "approval-banner", role: "region",
                              "aria-label": "Pending approvals" },
                     this.bannerText, this.reviewButton);
    this.banner.hidden = true;
    this.notes = el("div", { class: "approval-notes", role: "status", "aria-live": "polite" });
    this.root.append(this.dialog, this.banner, this.notes);
  }

  /**
   * An `approval.required` event: a followed run waits. The event may be a replay (a run
   * followed from its start after a reload), so the approval is read first: only a pending one
   * opens the dialog.
   */
  async required(event) {
    const startedAt = performance.now();
    let approval = event;
    try {
      approval = await call("GET", `/approvals/${event.approvalId}`);
    } catch {
      // not readable now: the event says enough, and the next poll corrects it
    }
    this.add(approval, startedAt);
  }

  /** A pending approval (an `approval.required` event or an `ApprovalInfo`) joins the queue. */
  add(approval, addedAt) {
    const id = approval.approvalId;
    if (this.pending.has(id) || this.decidedHere.has(id) || this.resolved.has(id)) return;
    if (approval.status && approval.status !== "pending") return;
    if (Date.parse(approval.expiresAt) <= Date.now()) return;
    this.pending.set(id, { approval, addedAt, sessionKey: null });
    this.deferred = false;  // something new: show it
    emit("approvals:pending", { count: this.pending.size });
    this.render();
  }

  /** The approval left the queue (decided or expired): close it here with a short note. */
  drop(id, outcome) {
    const item = this.pending.get(id);
    if (!item) return;
    this.pending.delete(id);
    this.say(`Approval of ${item.approval.tool}: ${outcome}.`);
    emit("approvals:pending", { count: this.pending.size });
    this.render();
  }

  async poll() {
    if (this.polling) return;
    this.polling = true;
    const started = performance.now();
    try {
      const page = await call("GET", "/approvals", { query: { status: "pending", limit: 100 } });
      const ids = new Set(page.approvals.map((a) => a.approvalId));
      for (const approval of [...page.approvals].reverse()) this.add(approval, started);  // oldest first
      for (const [id, item] of [...this.pending]) {
        // gone from the list: decided elsewhere (unless it arrived after this poll began)
        if (!ids.has(id) && item.addedAt < started) this.droppedElsewhere(id);
      }
    } catch (err) {
      console.warn("approvals: cannot list the pending approvals", err.message);
    } finally {
      this.polling = false;
    }
  }

  async droppedElsewhere(id) {
    let outcome = "decided elsewhere";
    try {
      const info = await call("GET", `/approvals/${id}`);
      const decision = { approved: "approve", denied: "deny", expired: "expired" }[info.status];
      if (decision) outcome = describe(decision, info.decidedBy, info.decisionReason);
    } catch {
      // gone altogether: "decided elsewhere" says enough
    }
    this.drop(id, outcome);
  }

  say(text) {
    const note = el("p", { class: "approval-note", text });
    this.notes.append(note);
    setTimeout(() => note.remove(), NOTE_MS);
  }

  later() {
    this.deferred = true;
    this.render();
  }

  render() {
    const first = this.pending.keys().next().value;
    const show = first !== undefined && !this.deferred;
    this.banner.hidden = !(first !== undefined && this.deferred);
    const n = this.pending.size;
    this.bannerText.textContent = `${n} tool call${n === 1 ? "" : "s"} waiting for approval`;
    if (!show) {
      this.current = null;
      if (this.dialog.open) this.dialog.close();
      return;
    }
    const id = this.current && this.pending.has(this.current) ? this.current : first;
    if (id !== this.current) this.fill(id);
    this.position.textContent = n > 1 ? `${[...this.pending.keys()].indexOf(id) + 1} of ${n} pending approvals` : "";
    if (!this.dialog.open) {
      this.dialog.showModal();
      this.title.focus();  // the heading, not a button: Enter must not decide by accident
    }
  }

  fill(id) {
    this.current = id;
    const item = this.pending.get(id);
    const a = item.approval;
    this.dialog.dataset.approvalId = id;
    this.dialog.dataset.tool = a.tool;
    this.title.replaceChildren("Approve ", el("code", { text: a.tool }), "?");
    this.risk.className = `risk risk-${a.risk}`;
    this.risk.textContent = a.risk;
    this.reason.textContent = a.reason;
    this.session.textContent = item.sessionKey || `run ${a.runId}`;
    if (!item.sessionKey) this.lookUpSession(id, item);
    const program = PROGRAMS[a.tool];
    const what = [];
    if (program && typeof a.args?.[program] === "string") {
      what.push(el("pre", { class: "approval-program", role: "group", "aria-label": program, text: a.args[program] }));
      const others = { ...a.args };
      delete others[program];
      if (Object.keys(others).length) {
        what.push(el("p", { class: "approval-label", text: "Other arguments" }),
                  el("pre", { class: "approval-args", text: pretty(others) }));
      }
    } else {
      what.push(el("pre", { class: "approval-args", role: "group", "aria-label": "arguments", text: pretty(a.args) }));
    }
    this.what.replaceChildren(...what);
    this.trust.value = "0";
    this.note.value = "";
    this.error.textContent = "";
    this.setBusy(false);
    if (a.canDecide === false) {
      // the rule names another approver (approverRole) or forbids self-approval: say so up front
      this.approveButton.disabled = this.denyButton.disabled = true;
      this.error.textContent = a.approverRole
        ? `Only a tenant ${a.approverRole === "owner" ? "owner" : "owner or admin"} may decide this (approverRole ${a.approverRole})${a.allowSelfApproval === false ? ", and not the run's own user" : ""}.`
        : "The run's own user may not decide this approval (its rule forbids self-approval).";
    }
    this.tick();
  }

  async lookUpSession(id, item) {
    try {
      const st = await runStatus(item.approval.runId);
      item.sessionKey = st.sessionKey;
      if (this.current === id) this.session.textContent = st.sessionKey;
    } catch {
      // the run id stays shown
    }
  }

  tick() {
    if (!this.current) return;
    const item = this.pending.get(this.current);
    if (!item) return;
    const left = Date.parse(item.approval.expiresAt) - Date.now();
    this.expiry.textContent = countdown(left);
    this.expiry.classList.toggle("soon", left < 60_000);
    if (left <= 0) this.drop(this.current, "expired (counts as denied)");
  }

  setBusy(busy) {
    for (const b of [this.approveButton, this.denyButton, this.laterButton]) b.disabled = busy;
  }

  async decide(decision) {
    const id = this.current;
    const item = id && this.pending.get(id);
    if (!item) return;
    const body = { decision };
    const trust = Number(this.trust.value);
    if (decision === "approve" && trust > 0) body.trustSeconds = trust;
    const reason = this.note.value.trim();
    if (reason) body.reason = reason;
    this.setBusy(true);
    this.error.textContent = "";
    try {
      await call("POST", `/approvals/${id}`, { body });
      this.decidedHere.add(id);
      this.drop(id, OUTCOMES[decision]);
    } catch (err) {
      if (err instanceof ApiError && (err.status === 404 || err.status === 409)) {
        this.decidedHere.add(id);
        this.drop(id, "decided elsewhere");
        return;
      }
      this.error.textContent = `Could not ${decision}: ${err.message}`;
      this.setBusy(false);
    }
  }
}
