// The memory panel (#memory-panel): the agent's long-term memory. Lists entries newest first
// (`GET /memory`, "Load more" pages with nextCursor), searches them (`POST /memory/search`, each
// result with its score), shows each entry's text, tags, importance, access count, last access
// and creation, and forgets one (`DELETE /memory/{id}`) after a confirmation dialog.
// With an agent picked ("agent:selected"), the list holds that agent's entries and a search
// covers that agent's entries plus the shared ones (the API's own filters).
import { call } from "../api.js";
import { el } from "../dom.js";
import { on } from "../bus.js";
import { trapFocus } from "./focus-trap.js";

const PAGE = 20;

/** "3 min ago", "2 h ago", or the date, from an ISO timestamp. */
export function ago(iso) {
  if (!iso) return "never";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

export class MemoryPanel {
  constructor(root) {
    this.root = root;
    this.agentId = null;
    this.query = "";
    this.cursor = null;
    this.loading = 0;  // a generation counter: a late answer of an older load is dropped

    const heading = el("h2", { text: "Memory" });
    this.scope = el("p", { class: "memory-scope muted" });
    this.form = el("form", { class: "memory-search" });
    this.form.setAttribute("role", "search");
    const label = el("label", { class: "visually-hidden", text: "Search memory" });
    label.htmlFor = "memory-query";
    this.input = el("input");
    Object.assign(this.input, {
      id: "memory-query", type: "search", name: "query", placeholder: "Search memory",
      maxLength: 2000,
    });
    const searchButton = el("button", { text: "Search" });
    searchButton.type = "submit";
    this.clearButton = el("button", { text: "Show all" });
    this.clearButton.type = "button";
    this.clearButton.hidden = true;
    const refresh = el("button", { class: "memory-refresh", text: "Refresh" });
    refresh.type = "button";
    this.form.append(label, this.input, searchButton, this.clearButton, refresh);

    this.status = el("p", { class: "memory-status" });
    this.status.setAttribute("role", "status");
    this.list = el("ol", { class: "memory-list" });
    this.list.setAttribute("aria-label", "Memory entries");
    this.more = el("button", { class: "memory-more", text: "Load more" });
    this.more.type = "button";
    this.more.hidden = true;
    this.dialog = this.confirmDialog();
    root.replaceChildren(heading, this.scope, this.form, this.status, this.list, this.more,
      this.dialog);

    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.query = this.input.value.trim();
      this.load();
    });
    this.clearButton.addEventListener("click", () => {
      this.input.value = this.query = "";
      this.load();
    });
    refresh.addEventListener("click", () => this.load());
    this.more.addEventListener("click", () => this.load({ append: true }));
    on("agent:selected", ({ agentId }) => {
      this.agentId = agentId || null;
      this.load();
    });
    on("panel:shown", ({ panelId }) => {
      if (panelId === this.root.id && !this.query) this.load();
    });
    // a run may have remembered something (/remember, memory tools, the pre-compaction flush)
    on("run:event", (event) => {
      if (["run.completed", "memory.flushed"].includes(event.type) && !this.query) this.load();
    });
    this.load();
  }

  showScope() {
    const who = this.agentId ? "the picked agent's" : "all";
    this.scope.textContent = this.query
      ? `Results for “${this.query}” among ${this.agentId ? "the picked agent's and shared" : "all"} entries`
      : `Newest first: ${who} entries`;
  }

  async load({ append = false } = {}) {
    const generation = ++this.loading;
    this.showScope();
    this.clearButton.hidden = !this.query;
    this.status.classList.remove("error");
    this.status.removeAttribute("role");
    this.status.setAttribute("role", "status");
    this.status.textContent = this.query ? "Searching…" : "Loading…";
    this.root.setAttribute("aria-busy", "true");
    try {
      let entries;
      let next = null;
      if (this.query) {
        const body = { query: this.query, limit: 50 };
        if (this.agentId) body.agentId = this.agentId;
        entries = (await call("POST", "/memory/search", { body })).results;
      } else {
        const query = { limit: PAGE };
        if (this.agentId) query.agentId = this.agentId;
        if (append && this.cursor) query.before = this.cursor;
        const page = await call("GET", "/memory", { query });
        entries = page.entries;
        next = page.nextCursor;
      }
      if (generation !== this.loading) return;
      this.cursor = next;
      this.more.hidden = !next;
      if (!append) this.list.replaceChildren();
      for (const entry of entries) this.list.appendChild(this.entryItem(entry));
      const count = this.list.children.length;
      if (!count) {
        this.status.textContent = this.query
          ? `No memory matches “${this.query}”.`
          : "No memories yet. The agent stores them with its memory tools (or try `/remember …` "
            + "with the offline model).";
      } else {
        this.status.textContent = this.query
          ? `${count} result${count === 1 ? "" : "s"}`
          : `${count} entr${count === 1 ? "y" : "ies"}${next ? " (more below)" : ""}`;
      }
    } catch (err) {
      if (generation !== this.loading) return;
      this.more.hidden = true;
      if (!append) this.list.replaceChildren();
      this.status.classList.add("error");
      this.status.setAttribute("role", "alert");
      this.status.textContent = `Cannot ${this.query ? "search" : "load"} memory: ${err.message}`;
    } finally {
      if (generation === this.loading) this.root.removeAttribute("aria-busy");
    }
  }

  entryItem(entry) {
    const item = el("li", { class: "memory-entry" });
    item.dataset.id = entry.id;
    const text = el("p", { class: "memory-text", text: entry.content });
    const meta = el("dl", { class: "memory-meta" });
    const add = (name, value, className) => {
      const wrap = el("div", { class: className });
      wrap.append(el("dt", { text: name }), el("dd", { text: value }));
      meta.appendChild(wrap);
    };
    add("importance", entry.importance.toFixed(2), "memory-importance");
    add("accessed", `${entry.accessCount}×`, "memory-access");
    add("last access", ago(entry.lastAccessedAt), "memory-last");
    add("created", ago(entry.createdAt), "memory-created");
    if (entry.score !== undefined) add("score", entry.score.toPrecision(3), "memory-score");
    if (entry.chunkIndex !== null && entry.chunkIndex !== undefined) {
      add("chunk", String(entry.chunkIndex + 1), "memory-chunk");
    }
    const bar = el("span", { class: "importance-bar" });
    bar.setAttribute("aria-hidden", "true");
    bar.style.setProperty("--importance", String(entry.importance));
    item.append(bar, text);
    if (entry.tags.length) {
      const tags = el("ul", { class: "memory-tags" });
      tags.setAttribute("aria-label", "Tags");
      for (const tag of entry.tags) tags.appendChild(el("li", { class: "tag", text: tag }));
      item.appendChild(tags);
    }
    const forget = el("button", { class: "memory-forget", text: "Forget" });
    forget.type = "button";
    forget.setAttribute("aria-label", `Forget: ${entry.content.slice(0, 60)}`);
    forget.addEventListener("click", () => this.confirmForget(entry, item, forget));
    item.append(meta, forget);
    return item;
  }

  confirmDialog() {
    const dialog = el("dialog", { class: "memory-confirm" });
    dialog.setAttribute("aria-labelledby", "memory-confirm-title");
    const title = el("h3", { text: "Forget this memory?" });
    title.id = "memory-confirm-title";
    this.confirmText = el("blockquote", { class: "memory-confirm-text" });
    const note = el("p", { class: "muted", text: "The agent will no longer find it. This cannot be undone." });
    const form = el("form");
    form.method = "dialog";
    const cancel = el("button", { text: "Cancel" });
    cancel.value = "cancel";
    const ok = el("button", { class: "danger", text: "Forget" });
    ok.value = "forget";
    form.append(cancel, ok);
    dialog.append(title, this.confirmText, note, form);
    trapFocus(dialog);
    return dialog;
  }

  confirmForget(entry, item, button) {
    this.confirmText.textContent = entry.content;
    this.dialog.returnValue = "";
    this.dialog.showModal();
    this.dialog.querySelector("button[value=cancel]").focus();
    this.dialog.addEventListener("close", async () => {
      this.confirmText.textContent = "";
      if (this.dialog.returnValue !== "forget") {
        button.focus();
        return;
      }
      button.disabled = true;
      try {
        await call("DELETE", `/memory/${encodeURIComponent(entry.id)}`);
      } catch (err) {
        if (err.status !== 404) {  // 404: already gone, which is what was asked
          button.disabled = false;
          this.status.classList.add("error");
          this.status.setAttribute("role", "alert");
          this.status.textContent = `Cannot forget it: ${err.message}`;
          button.focus();
          return;
        }
      }
      const next = item.nextElementSibling || item.previousElementSibling;
      item.remove();
      this.status.classList.remove("error");
      this.status.setAttribute("role", "status");
      this.status.textContent = "Forgotten.";
      (next?.querySelector(".memory-forget") || this.input).focus();
    }, { once: true });
  }
}
