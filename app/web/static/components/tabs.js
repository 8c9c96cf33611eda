// Tabs (the WAI-ARIA tabs pattern): click or arrow keys switch panels; only the active tab is in
// the Tab order. Markup: a [role=tablist] of [role=tab][aria-controls] buttons. Showing a panel
// emits "panel:shown" {panelId} on the bus, so a panel can bring itself up to date.
import { emit } from "../bus.js";

export function mountTabs(tablist) {
  const tabs = [...tablist.querySelectorAll("[role=tab]")];
  const select = (tab, focus = false) => {
    for (const t of tabs) {
      const active = t === tab;
      t.setAttribute("aria-selected", String(active));
      t.tabIndex = active ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !active;
    }
    if (focus) tab.focus();
    emit("panel:shown", { panelId: tab.getAttribute("aria-controls") });
  };
  tablist.addEventListener("click", (e) => {
    const tab = e.target.closest("[role=tab]");
    if (tab) select(tab);
  });
  tablist.addEventListener("keydown", (e) => {
    const i = tabs.indexOf(document.activeElement);
    if (i < 0) return;
    const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
    if (next === undefined) return;
    e.preventDefault();
    select(tabs[(next + tabs.length) % tabs.length], true);
  });
  select(tabs.find((t) => t.getAttribute("aria-selected") === "true") || tabs[0]);
  return { select: (id) => select(tabs.find((t) => t.id === id)) };
}
