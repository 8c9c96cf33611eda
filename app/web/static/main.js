// The workbench's entry point: sign in, then mount the components. Each component owns one
// region of index.html and talks to the others only through bus.js.
import { signIn } from "./auth.js";
import { Chat } from "./components/chat.js";
import { RunStatus } from "./components/run-status.js";
import { SessionsPanel } from "./components/sessions.js";
import { mountTabs } from "./components/tabs.js";

async function main() {
  const signedIn = await signIn(document.getElementById("signin"));
  if (!signedIn) return;
  mountTabs(document.querySelector(".sidebar [role=tablist]"));
  window.workbench = {
    runStatus: new RunStatus(document.getElementById("run-status")),
    sessions: new SessionsPanel(document.getElementById("sessions-panel")),
    chat: new Chat(document.getElementById("app")),
  };
  window.workbench.chat.openFromUrl();  // a reload reopens its session (and resumes its run)
  document.body.dataset.ready = "true";
}

main().catch((err) => {
  document.getElementById("signin").textContent = `Cannot start: ${err.message}`;
});
