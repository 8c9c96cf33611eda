// The workbench's entry point: sign in, then mount the components.
import { signIn } from "./auth.js";
import { Chat } from "./components/chat.js";

async function main() {
  const signedIn = await signIn(document.getElementById("signin"));
  if (!signedIn) return;
  window.workbench = { chat: new Chat(document.getElementById("app")) };
  document.body.dataset.ready = "true";
}

main().catch((err) => {
  document.getElementById("signin").textContent = `Cannot start: ${err.message}`;
});
