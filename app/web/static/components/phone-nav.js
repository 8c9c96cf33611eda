// At phone width the three columns stack (chat, run, side panels), so the panels are far down
// the page. This bar (shown only at phone width, sticky at the top) jumps to each: "Chat" puts
// the focus in the message box; "Run" goes to the run panel; "Sessions", "Memory" and "Agent"
// pick that side tab and go to it, its tab focused.

export class PhoneNav {
  /** `nav`: the bar's element; `tabs`: the side tabs (mountTabs' result). */
  constructor(nav, tabs) {
    const targets = [
      ["Chat", () => document.getElementById("message")],
      ["Run", () => document.querySelector(".runpanel h2")],
      ["Sessions", () => this.tab("tab-sessions")],
      ["Memory", () => this.tab("tab-memory")],
      ["Agent", () => this.tab("tab-agent")],
    ];
    this.tabs = tabs;
    const buttons = targets.map(([label, target]) => {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = label;
      button.addEventListener("click", () => {
        const element = target();
        // the message box at the bottom, under its conversation; a panel from its top
        element.scrollIntoView({ block: label === "Chat" ? "end" : "start" });
        element.focus({ preventScroll: true });
      });
      return button;
    });
    nav.replaceChildren(...buttons);
    nav.hidden = false;
  }

  tab(id) {
    this.tabs.select(id);
    return document.getElementById(id);
  }
}
