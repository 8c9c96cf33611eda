// The workbench's entry point: sign in, then mount the components. Each component owns one
// region of index.html and talks to the others only through bus.js.
import { signIn } from "./auth.js";
import { Agents } from "./components/agents.js";
import { Approvals } from "./components/approval.js";
import { Chat } from "./components/chat.js";
import { MemoryPanel } from "./components/memory.js";
import { Plan } from "./components/plan.js";
import { RunStatus } from "./components/run-status.js";
import { SessionsPanel } from "./components/sessions.js";
import { PhoneNav } from "./components/phone-nav.js";
import { mountTabs } from "./components/tabs.js";

// The skip link focuses the message box without touching the URL (its hash names the session).
document.querySelector(".skip-link").addEventListener("click", (e) => {
  e.preventDefault();
  document.getElementById("message").focus();
});

async function main() {
  const signedIn = await signIn(document.getElementById("signin"));
  if (!signedIn) return;
  const tabs = mountTabs(document.querySelector(".sidebar [role=tablist]"));
  window.workbench = {
    phoneNav: new PhoneNav(document.getElementById("phone-nav"), tabs),
    runStatus: new RunStatus(document.getElementById("run-status"),
                             document.getElementById("run-announce")),
    sessions: new SessionsPanel(document.getElementById("sessions-panel")),
    plan: new Plan(document.getElementById("plan")),
    approvals: new Approvals(document.getElementById("approvals")),
    chat: new Chat(document.getElementById("app")),
    memory: new MemoryPanel(document.getElementById("memory-panel")),
    agents: new Agents(document.getElementById("agent-picker"), document.getElementById("agent-panel")),
  };
  window.workbench.chat.openFromUrl();  // a reload reopens its session (and resumes its run)
  document.body.dataset.ready = "true";
}

main().catch((err) => {
  document.getElementById("signin").textContent = `Cannot start: ${err.message}`;
});
