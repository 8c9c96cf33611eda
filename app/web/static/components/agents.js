// Agents and policy. The picker (#agent-picker, top bar) lists the tenant's agents
// (`GET /agents`) and emits "agent:selected" {agentId} — null for the tenant's default agent, so
// new sessions are posted without agentId. The panel (#agent-panel) shows the picked agent's
// settings (model, mode, limits) and what its tool policy allows and denies, with the reason,
// risk and approval rule of each tool (`GET /tools?agentId=`). A "New agent" form creates one
// (`POST /agents`: name, mode chat/plan, model, system prompt) and picks it.
import { call } from "../api.js";
import { el } from "../dom.js";
import { emit, on } from "../bus.js";

const orDefault = (value, fallback) => (value === null || value === undefined ? fallback : value);

export class Agents {
  constructor(picker, panel) {
    this.picker = picker;
    this.panel = panel;
    this.agents = [];
    this.selected = null;  // the picked agent's row (the default agent when agentId is null)

    const label = el("label", { class: "agent-picker-label" });
    label.htmlFor = "agent-select";
    label.textContent = "Agent";
    this.select = el("select");
    this.select.id = "agent-select";
    this.select.title = "The agent of new sessions";
    picker.replaceChildren(label, this.select);
    this.select.addEventListener("change", () => this.pick(this.select.value || null));
    on("session:agent", ({ agentId }) => this.follow(agentId));

    this.details = el("section", { class: "agent-details" });
    this.details.setAttribute("aria-label", "Agent settings");
    this.tools = el("section", { class: "agent-tools" });
    this.tools.setAttribute("aria-label", "Tools and policy");
    this.status = el("p", { class: "agent-status" });
    this.status.setAttribute("role", "status");
    panel.replaceChildren(this.status, this.details, this.tools, this.newAgentForm());
    this.load();
  }

  /** Fill the picker; keep the current choice if it still exists. */
  async load(selectId = this.selected && !this.selected.isDefault ? this.selected.id : null) {
    try {
      this.agents = (await call("GET", "/agents")).agents;
    } catch (err) {
      this.error(`Cannot list agents: ${err.message}`);
      return;
    }
    this.select.replaceChildren();
    for (const agent of this.agents) {
      const option = el("option", { text: agent.isDefault && agent.name !== "default" ? `${agent.name} (default)`
          : `${agent.name}${agent.mode === "plan" ? " · plan" : ""}` });
      option.value = agent.isDefault ? "" : agent.id;
      this.select.appendChild(option);
    }
    const known = this.agents.some((a) => a.id === selectId && !a.isDefault);
    this.select.value = known ? selectId : "";
    await this.pick(known ? selectId : null, { announce: known });
    if (this.pendingAgent) this.follow(this.pendingAgent);
  }

  async pick(agentId, { announce = true } = {}) {
    this.selected = agentId
      ? this.agents.find((a) => a.id === agentId)
      : this.agents.find((a) => a.isDefault) || null;
    if (announce) emit("agent:selected", { agentId });
    this.showDetails();
    await this.loadTools(agentId);
  }

  /** An opened session's agent: show it in the picker (new sessions then use it too). */
  follow(agentId) {
    const agent = this.agents.find((a) => a.id === agentId);
    this.pendingAgent = agent ? null : agentId;  // the list may not be loaded yet
    if (!agent) return;
    const value = agent.isDefault ? "" : agent.id;
    if (this.select.value === value) return;
    this.select.value = value;
    this.pick(value || null);
  }

  error(text) {
    this.status.textContent = text;
    this.status.className = "agent-status error";
    this.status.setAttribute("role", "alert");
  }

  showDetails() {
    const a = this.selected;
    this.details.replaceChildren();
    if (!a) return;
    const title = el("h2", { text: a.name });
    if (a.isDefault) title.appendChild(el("span", { class: "badge", text: "default" }));
    const dl = el("dl", { class: "agent-settings" });
    const row = (name, value) => {
      const wrap = el("div");
      wrap.append(el("dt", { text: name }), el("dd", { text: String(value) }));
      dl.appendChild(wrap);
    };
    row("model", a.model);
    row("fallback models", a.fallbackModels?.length ? a.fallbackModels.join(", ") : "none");
    row("mode", a.mode);
    row("max turns", a.maxTurns);
    row("timeout", a.timeoutSeconds ? `${a.timeoutSeconds} s` : "server default");
    row("token budget", orDefault(a.tokenBudget, "unlimited"));
    row("context window", orDefault(a.contextWindow, "model default"));
    row("if busy", a.ifBusy);
    row("sub-agent depth", orDefault(a.maxSpawnDepth, "server default"));
    row("children per run", orDefault(a.maxChildrenPerRun, "server default"));
    this.details.append(title, dl);
    if (a.systemPrompt) {
      const prompt = el("details", { class: "agent-prompt" });
      prompt.append(el("summary", { text: "System prompt" }), el("pre", { text: a.systemPrompt }));
      this.details.appendChild(prompt);
    }
  }

  async loadTools(agentId) {
    this.tools.replaceChildren(el("p", { class: "muted", text: "Loading tools…" }));
    this.tools.setAttribute("aria-busy", "true");
    let page;
    try {
      page = await call("GET", "/tools", { query: agentId ? { agentId } : {} });
    } catch (err) {
      this.tools.replaceChildren();
      this.error(`Cannot load the tool policy: ${err.message}`);
      return;
    } finally {
      this.tools.removeAttribute("aria-busy");
    }
    if ((agentId || null) !== (this.select.value || null)) return;  // picked another meanwhile
    this.status.textContent = "";
    this.status.className = "agent-status";
    this.status.setAttribute("role", "status");
    const heading = el("h3", { text: "Tools" });
    const summary = el("p", { class: "tool-policy-summary" });
    const limits = [
      page.maxCallsPerTurn ? `${page.maxCallsPerTurn} calls per turn` : null,
      page.maxCallsPerRun ? `${page.maxCallsPerRun} calls per run` : null,
    ].filter(Boolean);
    summary.textContent = `Profile “${page.profile}” (from the ${page.profileSource} policy)`
      + `${page.owner ? ", you own this agent" : ""}`
      + `${limits.length ? `; at most ${limits.join(", ")}` : ""}.`
      + " Calls of the tools marked “needs approval” wait for a person to approve them.";
    this.tools.replaceChildren(heading, summary,
      this.toolList(`May use (${page.allowed.length})`, page.allowed, "allowed"),
      this.toolList(`Denied (${page.denied.length})`, page.denied, "denied"));
    const unavailable = page.unavailable || [];
    if (unavailable.length) this.tools.appendChild(this.unavailableList(unavailable));
  }

  /** The tenant's tools (MCP servers, HTTP tools) that cannot be offered now, and why. */
  unavailableList(entries) {
    const [section, list] = openList(`Unavailable now (${entries.length})`, "unavailable");
    for (const entry of entries) {
      const item = el("li", { class: "tool-policy" });
      item.dataset.source = entry.source;
      const head = el("div", { class: "tool-policy-head" });
      head.append(el("code", { class: "tool-policy-name", text: entry.tools }),
        el("span", { class: "badge", text: entry.source }));
      item.append(head, el("p", { class: "tool-policy-reason", text: entry.reason }));
      list.appendChild(item);
    }
    section.appendChild(list);
    return section;
  }

  toolList(title, tools, kind) {
    const [section, list] = openList(title, kind);
    for (const tool of tools) {
      const item = el("li", { class: "tool-policy" });
      item.dataset.tool = tool.name;
      const head = el("div", { class: "tool-policy-head" });
      head.append(el("code", { class: "tool-policy-name", text: tool.name }),
        el("span", { class: `risk risk-${tool.risk}`, text: `${tool.risk} risk` }));
      if (tool.ownerOnly) head.appendChild(el("span", { class: "badge", text: "owner only" }));
      if (tool.source && tool.source !== "built-in") {
        head.appendChild(el("span", { class: "badge", text: tool.source }));
      }
      item.append(head, el("p", { class: "tool-policy-reason", text: tool.reason }));
      if (tool.approval) {
        item.classList.add("gated");
        item.appendChild(el("p", { class: "tool-policy-approval", text: `Needs approval: ${tool.approval}` }));
      }
      item.title = tool.description;
      list.appendChild(item);
    }
    if (!tools.length) list.appendChild(el("li", { class: "muted", text: "none" }));
    section.appendChild(list);
    return section;
  }

  newAgentForm() {
    const wrap = el("details", { class: "new-agent" });
    wrap.appendChild(el("summary", { text: "New agent" }));
    const form = el("form");
    form.setAttribute("aria-label", "New agent");
    const field = (text, control) => {
      control.id = `new-agent-${control.name}`;
      const label = el("label", { text: text });
      label.htmlFor = control.id;
      const wrap = el("div", { class: "field" });
      wrap.append(label, control);
      return wrap;
    };
    const name = el("input");
    Object.assign(name, { name: "name", required: true, maxLength: 100, autocomplete: "off" });
    const mode = el("select");
    mode.name = "mode";
    for (const [value, text] of [["chat", "chat: answer directly"], ["plan", "plan: plan the steps, then run them"]]) {
      const option = el("option", { text: text });
      option.value = value;
      mode.appendChild(option);
    }
    const model = el("input");
    Object.assign(model, { name: "model", placeholder: "server default", autocomplete: "off" });
    const prompt = el("textarea");
    Object.assign(prompt, { name: "systemPrompt", rows: 3 });
    const status = el("p", { class: "new-agent-status" });
    status.setAttribute("role", "status");
    const submit = el("button", { text: "Create agent" });
    submit.type = "submit";
    form.append(field("Name", name), field("Mode", mode), field("Model (optional)", model),
      field("System prompt (optional)", prompt), submit, status);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const body = { name: name.value.trim(), mode: mode.value };
      if (model.value.trim()) body.model = model.value.trim();
      if (prompt.value.trim()) body.systemPrompt = prompt.value;
      submit.disabled = true;
      status.className = "new-agent-status";
      status.setAttribute("role", "status");
      status.textContent = "Creating…";
      try {
        const agent = await call("POST", "/agents", { body });
        form.reset();
        status.textContent = `Created “${agent.name}”; new sessions use it.`;
        await this.load(agent.id);
      } catch (err) {
        status.className = "new-agent-status error";
        status.setAttribute("role", "alert");
        status.textContent = `Not created: ${err.message}`;
      } finally {
        submit.disabled = false;
      }
    });
    wrap.appendChild(form);
    return wrap;
  }
}

/** An open, titled list section of the tools panel (`kind`: allowed, denied, unavailable); the
 * caller fills `list` and appends it to `section`. */
function openList(title, kind) {
  const section = el("details", { class: `tool-list ${kind}` });
  section.open = true;
  section.appendChild(el("summary", { text: title }));
  return [section, el("ul")];
}
