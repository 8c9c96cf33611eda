// The sessions panel: the user's sessions, most recently active first, with a search box and
// "Load more" (keyset pages); a sub-agent's session is nested under the session that spawned it.
// Clicking a session asks the chat to open it ("session:open"); "New session" asks for a fresh
// one ("session:new"). The list follows the chat: the open session is marked (aria-current),
// and the list reloads when the session changes or one of its runs ends.
import { call } from "../api.js";
import { emit, on } from "../bus.js";
import { el } from "../dom.js";

const PAGE_SIZE = 30;
const SEARCH_DELAY_MS = 250;
const REFRESH_EVENTS = ["run.completed", "run.failed", "run.cancelled", "subagent.spawned"];

/** "3 min ago", "yesterday", or the date: when the session was last active. */
export function ago(iso, now = Date.now()) {
  const seconds = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  if (seconds < 2 * 86400) return "yesterday";
  return new Date(iso).toLocaleDateString();
}

export class SessionsPanel {
  constructor(root) {
    this.root = root;
    this.current = null;  // the chat's session key
    this.sessions = [];  // loaded so far, in the API's order
    this.cursor = null;  // nextCursor of the last page (null: no more)
    this.query = "";
    this.agents = new Map();  // agentId → name
    this.loading = null;
    this.build();
    on("session:changed", ({ sessionKey }) => {
      this.current = sessionKey;
      this.refresh();
    });
    on("run:event", (event) => {
      if (REFRESH_EVENTS.includes(event.type)) this.refreshSoon();
    });
    this.loadAgents();
    this.refresh();
  }

  build() {
    const heading = el("h2", { id: "sessions-heading", class: "visually-hidden", text: "Sessions" });
    this.newButton = el("button", { type: "button", class: "session-new", text: "New session" });
    this.newButton.addEventListener("click", () => emit("session:new", {}));
    const head = el("div", { class: "sessions-head" }, heading, this.newButton);

    this.search = el("input", {
      type: "search", id: "session-search", autocomplete: "off", placeholder: "key or title",
    });
    const searchForm = el("form", { class: "session-search", role: "search" },
                          el("label", { for: "session-search", text: "Search sessions" }),
                          this.search);
    searchForm.addEventListener("submit", (e) => {
      e.preventDefault();
      this.setQuery(this.search.value);
    });
    this.search.addEventListener("input", () => {
      clearTimeout(this.searchTimer);
      this.searchTimer = setTimeout(() => this.setQuery(this.search.value), SEARCH_DELAY_MS);
    });

    this.tree = el("ul", { class: "session-tree", "aria-labelledby": "sessions-heading" });
    this.status = el("p", { class: "sessions-status", role: "status" });
    this.moreButton = el("button", { type: "button", class: "session-more", text: "Load more" });
    this.moreButton.hidden = true;
    this.moreButton.addEventListener("click", () => this.loadMore());
    this.root.replaceChildren(head, searchForm, this.tree, this.moreButton, this.status);
  }

  async loadAgents() {
    try {
      const { agents } = await call("GET", "/agents");
      for (const agent of agents) this.agents.set(agent.id, agent.name);
      this.render();
    } catch {
      // the agent's id is shown instead of its name
    }
  }

  setQuery(text) {
    const query = text.trim();
    if (query === this.query) return;
    this.query = query;
    this.refresh();
  }

  refreshSoon() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.refresh(), 200);
  }

  /** Reload from the first page, keeping as many sessions as were shown. */
  refresh() {
    const shown = Math.max(PAGE_SIZE, this.sessions.length);
    return this.load({ reset: true, limit: Math.min(shown, 200) });
  }

  loadMore() {
    if (this.cursor) return this.load({ reset: false, limit: PAGE_SIZE });
    return Promise.resolve();
  }

  async load({ reset, limit }) {
    const token = {};
    this.loading = token;
    this.root.setAttribute("aria-busy", "true");
    const query = { limit };
    if (this.query) query.q = this.query;
    if (!reset && this.cursor) query.before = this.cursor;
    try {
      const page = await call("GET", "/sessions", { query });
      if (this.loading !== token) return;  // a newer load superseded this one
      this.sessions = reset ? page.sessions : [...this.sessions, ...page.sessions];
      this.cursor = page.nextCursor;
      this.status.textContent = "";
      this.render();
    } catch (err) {
      if (this.loading === token) this.status.textContent = `Cannot list sessions: ${err.message}`;
    } finally {
      if (this.loading === token) this.root.removeAttribute("aria-busy");
    }
  }

  render() {
    const byKey = new Map(this.sessions.map((s) => [s.sessionKey, s]));
    const children = new Map();  // parent key → its loaded children
    const roots = [];
    for (const s of this.sessions) {
      const parent = s.parentSessionKey;
      if (parent && byKey.has(parent)) {
        if (!children.has(parent)) children.set(parent, []);
        children.get(parent).push(s);
      } else {
        roots.push(s);
      }
    }
    const seen = new Set();
    const branch = (s, parentKey = null) => {
      seen.add(s.sessionKey);
      const li = el("li", { class: "session-node" }, this.row(s, parentKey));
      const kids = (children.get(s.sessionKey) || []).filter((k) => !seen.has(k.sessionKey));
      if (kids.length) {
        const ul = el("ul", { class: "session-children",
                              "aria-label": `Sub-agents of ${s.title || s.sessionKey}` });
        for (const kid of kids) ul.appendChild(branch(kid, s.sessionKey));
        li.appendChild(ul);
      }
      return li;
    };
    this.tree.replaceChildren(...roots.map(branch));
    this.moreButton.hidden = !this.cursor;
    if (!this.sessions.length) {
      this.status.textContent = this.query ? `No session matches “${this.query}”.` : "No sessions yet.";
    }
  }

  row(s, parentKey = null) {
    // under its parent, a child's key is shown without the parent's part (the title has it all)
    const nested = parentKey && s.sessionKey.startsWith(`${parentKey}:`);
    const name = s.title || (nested ? s.sessionKey.slice(parentKey.length + 1) : s.sessionKey);
    const title = el("span", { class: "session-name", text: name });
    const agent = this.agents.get(s.agentId) || s.agentId.slice(0, 8);
    const messages = `${s.messageCount} message${s.messageCount === 1 ? "" : "s"}`;
    const meta = el("span", { class: "session-meta" },
                    el("span", { class: "session-agent", text: agent }),
                    ` · ${messages} · `,
                    el("time", { datetime: s.updatedAt, text: ago(s.updatedAt) }));
    const button = el("button", { type: "button", class: "session-row" }, title, meta);
    button.dataset.sessionKey = s.sessionKey;
    if (s.liveRunId) {
      button.classList.add("live");
      title.append(el("span", { class: "session-live", text: " ● live" }));
    }
    if (s.parentSessionKey) button.title = `${s.sessionKey}: sub-agent of ${s.parentSessionKey}`;
    if (s.sessionKey === this.current) button.setAttribute("aria-current", "true");
    button.addEventListener("click", () => emit("session:open", { sessionKey: s.sessionKey }));
    return button;
  }
}
